package configure

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/planner"
)

// VerifyJSON compares the best layout's prediction with a check of it
// (docs/reference.md §27.6).
type VerifyJSON struct {
	// Mode is "sim" (the whole workload simulated), "serve" (a turbine serve started
	// here) or "url" (a service at URL).
	Mode   string `json:"mode"`
	URL    string `json:"url,omitempty"`
	Layout string `json:"layout"`
	// Requests checked; Speedup: arrivals and engines that many times faster (times are
	// reported in the timing model's, multiplied back).
	Requests int     `json:"requests"`
	Speedup  float64 `json:"speedup"`
	// TimerResolutionMs and StepOverheadMs: the host model of the simulation a real
	// check is compared with (--verify-timer-resolution, --verify-step-overhead), ms of
	// real time.
	TimerResolutionMs float64 `json:"timer_resolution_ms,omitempty"`
	StepOverheadMs    float64 `json:"step_overhead_ms,omitempty"`
	// Predicted is the search's prediction (sim) or the simulation of the same requests
	// (serve, url); Measured is the check's.
	Predicted CheckJSON `json:"predicted"`
	Measured  CheckJSON `json:"measured"`
	// GoodputError is (predicted − measured) / measured goodput; null when measured is 0.
	GoodputError jsonFloat `json:"goodput_error"`
	Note         string    `json:"note,omitempty"`
}

// CheckJSON is one side of a comparison.
type CheckJSON struct {
	Requests   int           `json:"requests"`
	Failed     int           `json:"failed"`
	TTFT       LatenciesJSON `json:"ttft_ms"`
	ITL        LatenciesJSON `json:"itl_ms"`
	Attainment float64       `json:"attainment"`
	DurationS  float64       `json:"duration_s"`
	Goodput    float64       `json:"goodput"`
}

func checkJSON(s planner.LayoutScore) CheckJSON {
	return CheckJSON{Requests: s.Requests, Failed: s.Failed, TTFT: LatenciesJSON{P50: jsonFloat(s.TTFT.P50), At: jsonFloat(s.TTFT.At)},
		ITL: LatenciesJSON{P50: jsonFloat(s.ITL.P50), At: jsonFloat(s.ITL.At)}, Attainment: s.Attainment, DurationS: s.DurationS, Goodput: s.Goodput}
}

func compare(v *VerifyJSON, predicted, measured planner.LayoutScore) *VerifyJSON {
	v.Predicted, v.Measured = checkJSON(predicted), checkJSON(measured)
	v.GoodputError = jsonFloat(math.NaN())
	if measured.Goodput > 0 {
		v.GoodputError = jsonFloat((predicted.Goodput - measured.Goodput) / measured.Goodput)
	}
	return v
}

// validateVerify checks --verify: sim, serve or an http(s) base URL.
func (o *Options) validateVerify() error {
	switch o.Verify {
	case "", "sim", "serve":
		return nil
	}
	u, err := url.Parse(o.Verify)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--verify %q: want sim, serve or a service's base URL (http://host:port)", o.Verify)
	}
	return nil
}

// verify checks the best layout's prediction as --verify asks.
func (o *Options) verify(ctx context.Context, s *setup, res *searchResult, stderr io.Writer) (*VerifyJSON, error) {
	best := res.best()
	l := best.Layout
	if o.Verify == "sim" {
		v := &VerifyJSON{Mode: "sim", Layout: l.String(), Requests: len(s.reqs), Speedup: 1}
		if whole(res.windows, len(s.reqs)) {
			v.Note = "the search simulated the whole workload: the prediction is that simulation"
			return compare(v, best.LayoutScore, best.LayoutScore), nil
		}
		fmt.Fprintf(stderr, "configure: verifying %s: simulating the whole workload (%d requests)\n", l, len(s.reqs))
		scores, err := o.evaluate(ctx, s, []planner.Layout{l}, []window{{reqs: s.reqs}}, 1, sim.Host{}, len(s.reqs), s.span)
		if err != nil {
			return nil, err
		}
		return compare(v, best.LayoutScore, scores[0]), nil
	}

	// Real processes: the workload's first requests, arrivals shifted to 0 and divided
	// by the speedup, against the same requests simulated with engines at that speedup.
	S := o.VerifySpeedup
	n := min(o.VerifyRequests, len(s.reqs))
	slice := make([]bench.Request, n)
	origin := s.reqs[0].Arrival
	for i := range slice {
		slice[i] = s.reqs[i]
		slice[i].Arrival = time.Duration(float64(s.reqs[i].Arrival-origin) / S)
	}
	span := s.reqs[n-1].Arrival - origin
	v := &VerifyJSON{Mode: "url", URL: o.Verify, Layout: l.String(), Requests: n, Speedup: S,
		TimerResolutionMs: ms(o.VerifyHost.TimerResolution), StepOverheadMs: ms(o.VerifyHost.StepOverhead)}
	base := o.Verify
	if o.Verify == "serve" {
		v.Mode, v.URL = "serve", ""
		srv, serveArgs, err := o.startServe(ctx, s, l, stderr)
		if err != nil {
			return nil, fmt.Errorf("--verify serve: %w", err)
		}
		defer func() { _ = srv.Stop() }()
		base = srv.URL
		v.Note = "turbine serve " + shellJoin(serveArgs)
	}
	fmt.Fprintf(stderr, "configure: verifying %s: the first %d requests, %g times faster, against %s\n", l, n, S, base)
	predicted, err := o.evaluate(ctx, s, []planner.Layout{l}, []window{{reqs: slice}}, S, o.VerifyHost, n, span)
	if err != nil {
		return nil, err
	}
	// A request that hangs ends after verifyTimeout as a failure (bench's --timeout).
	runner := &bench.Runner{Client: &bench.Client{URL: strings.TrimSuffix(base, "/"), Model: s.card.GetModel(),
		HTTP: &http.Client{Timeout: verifyTimeout}}, BlockTokens: o.BlockTokens}
	out := runner.Run(ctx, slice)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	w := window{reqs: slice}
	measured := planner.ScoreLayout(l, outcomes(out.Results, S), n,
		planner.PredictDuration(span, []time.Duration{scaleDuration(tail(w, out.Results), S)}), o.targets())
	if measured.Failed == measured.Requests {
		return nil, fmt.Errorf("--verify %s: every request failed (%s)", o.Verify, firstError(out.Results))
	}
	return compare(v, predicted[0], measured), nil
}

// verifyTimeout bounds one request of a real check, its whole answer included.
const verifyTimeout = 10 * time.Minute

// firstError describes the first failed result.
func firstError(results []bench.Result) string {
	for _, r := range results {
		if r.Error != "" {
			return r.Error + ": " + r.Detail
		}
	}
	return "none"
}

// printVerify writes the comparison.
func printVerify(w io.Writer, rep *Report, v *VerifyJSON) {
	pct := "p" + strconv.FormatFloat(rep.Targets.Percentile, 'f', -1, 64)
	what := map[string]string{"sim": "simulated on the whole workload", "serve": "real processes (turbine serve started here)", "url": "real processes at " + v.URL}[v.Mode]
	fmt.Fprintf(w, "\ncheck of %s, %s: %d requests", v.Layout, what, v.Requests)
	if v.Speedup != 1 {
		fmt.Fprintf(w, " at %g× speed (times multiplied back)", v.Speedup)
	}
	if v.Mode != "sim" {
		fmt.Fprintf(w, "; predicted with the engines' steps rounded up to %g ms and %g ms added to each", v.TimerResolutionMs, v.StepOverheadMs)
	}
	fmt.Fprintln(w)
	label := map[string]string{"sim": "simulated"}[v.Mode]
	if label == "" {
		label = "measured"
	}
	row := func(name string, c CheckJSON) {
		fmt.Fprintf(w, "  %-10s TTFT p50/%s %s / %s ms, ITL p50/%s %s / %s ms, on target %.1f%%, goodput %.4g req/s/GPU\n", name,
			pct, num(float64(c.TTFT.P50)), num(float64(c.TTFT.At)), pct, num(float64(c.ITL.P50)), num(float64(c.ITL.At)), 100*c.Attainment, c.Goodput)
	}
	row("predicted", v.Predicted)
	row(label, v.Measured)
	if e := float64(v.GoodputError); !math.IsNaN(e) {
		fmt.Fprintf(w, "  goodput predicted %+.1f%% from %s\n", 100*e, label)
	}
	if v.Note != "" {
		fmt.Fprintf(w, "  (%s)\n", v.Note)
	}
}
