package worker

import (
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
)

const grainTimeout = 5 * time.Second

// GrainClients returns the Router grain client for model and the Catalog grain client,
// as the worker uses them, over cluster c.
func GrainClients(c *pcluster.Cluster, model, catalogIdentity string) (RouterClient, CatalogClient) {
	return grainRouter{messages.GetRouterGrainClient(c, model)}, grainCatalog{messages.GetCatalogGrainClient(c, catalogIdentity)}
}

// grainRouter adapts the generated Router grain client to worker.RouterClient.
type grainRouter struct{ c *messages.RouterGrainClient }

func (g grainRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	return g.c.Register(m, pcluster.WithTimeout(grainTimeout))
}
func (g grainRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	return g.c.Deregister(m, pcluster.WithTimeout(grainTimeout))
}
func (g grainRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	return g.c.PublishEvents(m, pcluster.WithTimeout(grainTimeout))
}
func (g grainRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	return g.c.PublishDump(m, pcluster.WithTimeout(grainTimeout))
}

// grainCatalog adapts the generated Catalog grain client to worker.CatalogClient.
type grainCatalog struct{ c *messages.CatalogGrainClient }

func (g grainCatalog) Announce(m *messages.AnnounceModel) (*messages.Ack, error) {
	return g.c.Announce(m, pcluster.WithTimeout(grainTimeout))
}
