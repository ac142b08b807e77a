package worker

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RouterControlMethods are the Router grain methods a worker calls (its relay: the
// registration that is its heartbeat, KV event batches, block dumps, leaving).
var RouterControlMethods = []protoreflect.Name{"Register", "Deregister", "PublishEvents", "PublishDump"}

// UrgentRouterKind gives the Router grain kind k (router.Kind) a mailbox that processes
// the workers' calls (RouterControlMethods) before the routing traffic of gateways
// (Route, Free, PrefillDone, ...), each in arrival order, and returns k. Under load a
// frontend's gateway keeps hundreds of routing calls queued in the grain; a heartbeat
// or KV event batch waiting behind them would run past GrainTimeout, and a lost batch
// costs a full block dump.
func UrgentRouterKind(k *pcluster.Kind) *pcluster.Kind {
	k.Props.Configure(actor.WithMailbox(cluster.UrgentGrainMailbox(
		messages.File_turbine_proto.Services().ByName("Router"), RouterControlMethods...)))
	return k
}

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
