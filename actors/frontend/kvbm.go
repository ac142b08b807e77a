package frontend

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	kvbmactor "github.com/turbine-llm/turbine/actors/kvbm"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// The KV block managers' side of the frontend (docs/reference.md §9.5): GET /admin/kvbm
// asks the "kvbm" actor of every cluster member, in parallel, for its status; members
// without one answer a dead letter and are skipped, as are those that do not answer
// within kvbmStatusTimeout.

var _ gateway.KvbmAdmin = (*Backend)(nil)

// kvbmStatusTimeout bounds the wait for one member's block manager.
const kvbmStatusTimeout = kvbmactor.StatusTimeout

// KvbmStatuses asks every member's block manager for its status (gateway.KvbmAdmin),
// sorted by node id.
func (b *Backend) KvbmStatuses(ctx context.Context) ([]*messages.KvbmStatus, error) {
	c := b.c.Load()
	var addrs []string
	for _, m := range c.MemberList.Members().Members() {
		addrs = append(addrs, m.Address())
	}
	if self := c.ActorSystem.Address(); !slices.Contains(addrs, self) {
		addrs = append(addrs, self)
	}
	timeout := kvbmStatusTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	found := make([]*messages.KvbmStatus, len(addrs))
	var wg sync.WaitGroup
	root := c.ActorSystem.Root
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := root.RequestFuture(actor.NewPID(addr, kvbmactor.ActorName), &messages.KvbmStatusRequest{}, timeout).Result()
			if st, ok := res.(*messages.KvbmStatus); ok && err == nil {
				found[i] = st
			}
		}()
	}
	wg.Wait()
	var out []*messages.KvbmStatus
	for _, st := range found {
		if st != nil {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b *messages.KvbmStatus) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) })
	return out, nil
}
