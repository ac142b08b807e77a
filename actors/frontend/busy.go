package frontend

import (
	"context"
	"fmt"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

var _ gateway.BusyAdmin = (*Backend)(nil)

// thresholdsRequest is the Router grain message for update u over the current
// thresholds: a field u leaves nil is absent (unchanged); turning a test off (0 in u) is
// sent as -1, which the router core reads as off.
func thresholdsRequest(u gateway.BusyUpdate) *messages.BusyThresholds {
	off := func(v float64) float64 {
		if v <= 0 {
			return -1
		}
		return v
	}
	req := &messages.BusyThresholds{}
	if u.KVUsage != nil {
		v := off(*u.KVUsage)
		req.KvUsage = &v
	}
	if u.PrefillTokens != nil {
		v := int64(off(float64(*u.PrefillTokens)))
		req.PrefillTokens = &v
	}
	return req
}

// apply returns t changed by u (nil fields unchanged; values <= 0 turn a test off).
func apply(t kv.BusyThresholds, u gateway.BusyUpdate) kv.BusyThresholds {
	if u.KVUsage != nil {
		t.KVUsage = max(*u.KVUsage, 0)
	}
	if u.PrefillTokens != nil {
		t.PrefillTokens = max(*u.PrefillTokens, 0)
	}
	return t
}

// knownModel returns nil when model has, or recently had, a live worker, else
// gateway.ErrUnknownModel (wrapped); Router grains are never activated for other names.
func (b *Backend) knownModel(ctx context.Context, model string) error {
	models, err := b.Models(ctx)
	if err != nil {
		return err
	}
	for _, m := range models {
		if m.Model == model && m.GetLora() == nil { // an adapter has no Router grain of its own
			return nil
		}
	}
	if b.Recent(model) {
		return nil
	}
	return fmt.Errorf("%w: %q", gateway.ErrUnknownModel, model)
}

// SetBusyThresholds changes the busy thresholds of model's Router grain
// (gateway.BusyAdmin). This frontend remembers them for BusyStatus. Errors:
// gateway.ErrUnknownModel (wrapped), or the grain call's error.
func (b *Backend) SetBusyThresholds(ctx context.Context, model string, u gateway.BusyUpdate) error {
	if err := b.knownModel(ctx, model); err != nil {
		return err
	}
	if _, err := b.router(model).SetBusyThresholds(thresholdsRequest(u), pcluster.WithTimeout(b.cfg.RouteTimeout)); err != nil {
		return fmt.Errorf("frontend: set busy thresholds of %q: %w", model, err)
	}
	b.mu.Lock()
	b.busy[model] = apply(b.thresholds(model), u)
	b.mu.Unlock()
	return nil
}

// thresholds returns what this frontend last set for model, else Config.Busy. The
// caller holds b.mu.
func (b *Backend) thresholds(model string) kv.BusyThresholds {
	if t, ok := b.busy[model]; ok {
		return t
	}
	return kv.BusyThresholds{KVUsage: max(b.cfg.Busy.KVUsage, 0), PrefillTokens: max(b.cfg.Busy.PrefillTokens, 0)}
}

// BusyStatus returns model's busy thresholds and its workers' busy flags from the Router
// grain's Stats (gateway.BusyAdmin). The thresholds are the ones this frontend set last
// (or Config.Busy): RouterStats does not carry the grain's own, so a change made through
// another frontend shows here only in the workers' flags.
func (b *Backend) BusyStatus(ctx context.Context, model string) (*gateway.BusyStatus, error) {
	if err := b.knownModel(ctx, model); err != nil {
		return nil, err
	}
	st, err := b.routerStats(model)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	t := b.thresholds(model)
	b.mu.Unlock()
	out := &gateway.BusyStatus{Model: model, KVUsage: t.KVUsage, PrefillTokens: t.PrefillTokens, Workers: []gateway.BusyWorker{}}
	for _, w := range st.Workers {
		out.Workers = append(out.Workers, gateway.BusyWorker{WorkerID: w.WorkerId, Ready: w.Ready, Busy: w.Busy,
			ActiveBlocks: w.ActiveBlocks, ActivePrefillTokens: w.ActivePrefillTokens, EngineKVUsage: w.EngineKvUsage})
	}
	return out, nil
}

// ReadyWorkers counts model's ready workers by role ("aggregated", "prefill", "decode"),
// as its Router grain sees them. Errors: the Router grain could not be asked.
func (b *Backend) ReadyWorkers(model string) (map[string]int, error) {
	st, err := b.routerStats(model)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, w := range st.Workers {
		if w.Ready {
			out[w.Role.Label()]++
		}
	}
	return out, nil
}

// routerStats asks model's Router grain for its stats, within the route timeout.
func (b *Backend) routerStats(model string) (*messages.RouterStats, error) {
	st, err := b.router(model).Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(b.cfg.RouteTimeout))
	if err != nil {
		return nil, fmt.Errorf("frontend: router stats of %q: %w", model, err)
	}
	return st, nil
}
