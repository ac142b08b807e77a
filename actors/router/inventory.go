package router

import (
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/turbine-llm/turbine/messages"
)

// PublishInventory takes a node's KV block manager's inventory (docs/reference.md §9).
//
// TODO(tiers): applied to the router core's tier index.
func (g *Grain) PublishInventory(req *messages.KvbmInventory, _ cluster.GrainContext) (*messages.EventAck, error) {
	return &messages.EventAck{}, nil
}
