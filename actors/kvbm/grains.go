package kvbm

import (
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
)

// GrainRouters returns Config.Routers over cluster c: each model's Router grain, each
// call timing out after timeout.
func GrainRouters(c *pcluster.Cluster, timeout time.Duration) func(model string) RouterClient {
	return func(model string) RouterClient { return grainRouter{messages.GetRouterGrainClient(c, model), timeout} }
}

type grainRouter struct {
	c       *messages.RouterGrainClient
	timeout time.Duration
}

func (g grainRouter) PublishInventory(m *messages.KvbmInventory) (*messages.EventAck, error) {
	return g.c.PublishInventory(m, pcluster.WithTimeout(g.timeout))
}
