package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	core "github.com/turbine-llm/turbine/planner"
)

// DefaultWebhookTimeout bounds one POST of the virtual connector when VirtualConfig.Client
// is nil.
const DefaultWebhookTimeout = 10 * time.Second

// VirtualConfig configures the virtual connector: exactly one of File and WebhookURL.
type VirtualConfig struct {
	// File: each decision is appended to it as one JSON line (created 0644 if missing).
	File string
	// WebhookURL: each decision is POSTed to it as one JSON object
	// (Content-Type: application/json); an answer outside 2xx is an error.
	WebhookURL string
	// Client posts to WebhookURL; nil: a client with DefaultWebhookTimeout.
	Client *http.Client
	// Initial is the fleet Fleet reports for a model before its first decision (nil: no
	// worker). The external system's size at start, when it is known.
	Initial map[core.Pool]int
	// Now stamps records written by Scale (a decision carries its own time); nil:
	// time.Now.
	Now func() time.Time
}

// VirtualRecord is one decision as the virtual connector writes it.
type VirtualRecord struct {
	Time    time.Time      `json:"time"`
	Model   string         `json:"model"`
	Targets map[string]int `json:"targets"`          // pool name -> workers
	Reason  string         `json:"reason,omitempty"` // why the target is held, if it is
	Held    bool           `json:"held,omitempty"`
	Clamps  []string       `json:"clamps,omitempty"`
	Wanted  map[string]int `json:"wanted,omitempty"` // the formula's sizes, before clamps
}

// Virtual is the connector for an external system that sizes the fleet itself: it
// writes every decision (a JSON line per decision to a file, or a POST to a webhook) and
// changes nothing. It cannot see the fleet, so Fleet reports the latest target of a
// model as ready (docs/reference.md §27.5): the planner then never waits for a step, and
// its load-mode rules see only the loads the Router grain reports.
type Virtual struct {
	cfg    VirtualConfig
	client *http.Client

	mu     sync.Mutex
	file   *os.File
	target map[string]map[core.Pool]int // model -> latest target
}

// NewVirtual returns the virtual connector; with File it opens the file for appending
// now. Errors: none or both of File and WebhookURL, a URL that is not http(s), a file
// that cannot be opened.
func NewVirtual(cfg VirtualConfig) (*Virtual, error) {
	switch {
	case (cfg.File == "") == (cfg.WebhookURL == ""):
		return nil, errors.New("planner: virtual connector: give exactly one of a file and a webhook URL")
	case cfg.WebhookURL != "":
		u, err := url.Parse(cfg.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("planner: virtual connector: webhook URL %q, want http(s)://host/...", cfg.WebhookURL)
		}
	}
	for p, n := range cfg.Initial {
		if n < 0 {
			return nil, fmt.Errorf("planner: virtual connector: initial %s size %d < 0", p, n)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &Virtual{cfg: cfg, client: cfg.Client, target: map[string]map[core.Pool]int{}}
	if v.client == nil {
		v.client = &http.Client{Timeout: DefaultWebhookTimeout}
	}
	if cfg.File != "" {
		f, err := os.OpenFile(cfg.File, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("planner: virtual connector: %w", err)
		}
		v.file = f
	}
	return v, nil
}

// Name is "virtual".
func (v *Virtual) Name() string { return "virtual" }

// Fleet reports model's latest target (Initial before the first) as ready; nothing
// starting or stopping.
func (v *Virtual) Fleet(_ context.Context, model string) (core.Fleet, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.target[model]
	if !ok {
		t = v.cfg.Initial
	}
	return core.Fleet{Ready: maps.Clone(t), Starting: map[core.Pool]int{}, Stopping: map[core.Pool]int{}}, nil
}

// Scale writes target out (no reason: the grain calls WriteDecision instead).
func (v *Virtual) Scale(ctx context.Context, model string, target map[core.Pool]int) error {
	return v.WriteDecision(ctx, model, core.Decision{At: v.cfg.Now(), Target: target})
}

// WriteDecision writes d out; its target becomes the fleet Fleet reports, written or not
// (the planner must not re-plan from a size the external system may never have had).
func (v *Virtual) WriteDecision(ctx context.Context, model string, d core.Decision) error {
	rec := VirtualRecord{Time: d.At.UTC(), Model: model, Targets: poolMap(d.Target), Reason: d.Reason, Held: d.Held,
		Clamps: d.Clamps}
	if len(d.Wanted) > 0 {
		rec.Wanted = poolMap(d.Wanted)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("planner: virtual connector: %w", err)
	}
	v.mu.Lock()
	v.target[model] = maps.Clone(d.Target)
	f := v.file
	if f != nil {
		_, err = f.Write(append(line, '\n'))
	}
	v.mu.Unlock()
	if v.cfg.File != "" {
		if f == nil {
			return fmt.Errorf("planner: virtual connector: %s is closed", v.cfg.File)
		}
		if err != nil {
			return fmt.Errorf("planner: virtual connector: write %s: %w", v.cfg.File, err)
		}
		return nil
	}
	return v.post(ctx, line)
}

func (v *Virtual) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("planner: virtual connector: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return fmt.Errorf("planner: virtual connector: POST %s: %w", v.cfg.WebhookURL, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("planner: virtual connector: POST %s: %s: %s", v.cfg.WebhookURL, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Close closes the file (a webhook has nothing to close).
func (v *Virtual) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.file == nil {
		return nil
	}
	err := v.file.Close()
	v.file = nil
	return err
}
