package worker

import (
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
)

// GrainTimeout is the timeout of a worker's grain calls for heartbeat period hb: two
// periods, at least 1 s. A call caught by the death of the grain's member waits this
// long, and it delays the worker's registration with the re-activated grain by as much,
// so it stays short.
func GrainTimeout(hb time.Duration) time.Duration { return max(2*hb, time.Second) }

// GrainClients returns the Router grain client for model and the Catalog grain client,
// as the worker uses them, over cluster c; each call times out after timeout.
func GrainClients(c *pcluster.Cluster, model, catalogIdentity string, timeout time.Duration) (RouterClient, CatalogClient) {
	return grainRouter{messages.GetRouterGrainClient(c, model), timeout},
		grainCatalog{messages.GetCatalogGrainClient(c, catalogIdentity), timeout}
}

// grainRouter adapts the generated Router grain client to worker.RouterClient.
type grainRouter struct {
	c       *messages.RouterGrainClient
	timeout time.Duration
}

func (g grainRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	return g.c.Register(m, pcluster.WithTimeout(g.timeout))
}
func (g grainRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	return g.c.Deregister(m, pcluster.WithTimeout(g.timeout))
}
func (g grainRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	return g.c.PublishEvents(m, pcluster.WithTimeout(g.timeout))
}
func (g grainRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	return g.c.PublishDump(m, pcluster.WithTimeout(g.timeout))
}

// grainCatalog adapts the generated Catalog grain client to worker.CatalogClient.
type grainCatalog struct {
	c       *messages.CatalogGrainClient
	timeout time.Duration
}

func (g grainCatalog) Announce(m *messages.AnnounceModel) (*messages.Ack, error) {
	return g.c.Announce(m, pcluster.WithTimeout(g.timeout))
}
