package configure

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/turbine-llm/turbine/planner"
)

// Report is what `turbine configure` found, as --json writes it (docs/reference.md
// §27.6). Latencies are in ms; a latency without samples is null.
type Report struct {
	Workload string  `json:"workload"`
	Requests int     `json:"requests"`
	SpanS    float64 `json:"span_s"` // first to last arrival
	Profile  string  `json:"profile"`
	Model    string  `json:"model"`
	GPUs     int     `json:"gpus"`
	// TensorParallelSizes are the sizes searched.
	TensorParallelSizes []int       `json:"tensor_parallel_sizes"`
	Targets             TargetsJSON `json:"targets"`
	// Sample is what each layout's prediction simulated.
	Sample SampleJSON `json:"sample"`
	// Layouts: enumerated; Evaluated: simulated (the rest pruned or infeasible).
	Layouts   int `json:"layouts"`
	Evaluated int `json:"evaluated"`
	// Verdicts counts the layouts by verdict (planner.Verdict names).
	Verdicts map[string]int `json:"verdicts"`
	// Top holds the best --top layouts, best first; Best is the first.
	Top  []LayoutJSON `json:"top"`
	Best LayoutJSON   `json:"best"`
	// MeetsTargets: the best layout meets the targets (else no layout does).
	MeetsTargets bool `json:"meets_targets"`
	// Apply is --apply's output (with --json and --apply).
	Apply string `json:"apply,omitempty"`
	// Verify is --verify's comparison.
	Verify  *VerifyJSON `json:"verify,omitempty"`
	SearchS float64     `json:"search_s"` // wall time of the search
	WallS   float64     `json:"wall_s"`   // of the whole command
}

// TargetsJSON are the targets.
type TargetsJSON struct {
	TTFTMs     float64 `json:"ttft_ms"`
	ITLMs      float64 `json:"itl_ms"`
	Percentile float64 `json:"percentile"`
}

// SampleJSON describes the sample: Windows windows of Requests scored requests each,
// after Warmup requests each; Whole when it is the whole workload.
type SampleJSON struct {
	Whole    bool `json:"whole"`
	Windows  int  `json:"windows"`
	Requests int  `json:"requests_per_window"`
	Warmup   int  `json:"warmup_per_window"`
}

// LayoutJSON is one layout's line.
type LayoutJSON struct {
	Rank           int             `json:"rank"` // 0: not evaluated
	Layout         string          `json:"layout"`
	Disaggregated  bool            `json:"disaggregated"`
	GPUs           int             `json:"gpus"`
	Workers        int             `json:"workers"` // aggregated, or decode workers
	TP             int             `json:"tensor_parallel_size"`
	PrefillWorkers int             `json:"prefill_workers,omitempty"`
	PrefillTP      int             `json:"prefill_tensor_parallel_size,omitempty"`
	TTFT           LatenciesJSON   `json:"ttft_ms"`
	ITL            LatenciesJSON   `json:"itl_ms"`
	Requests       int             `json:"requests"`
	Failed         int             `json:"failed"`
	Met            int             `json:"met"`
	Attainment     float64         `json:"attainment"`
	DurationS      float64         `json:"duration_s"`
	Goodput        float64         `json:"goodput"` // requests meeting both targets per second per GPU
	Verdict        planner.Verdict `json:"verdict"`
	MeetsTargets   bool            `json:"meets_targets"`
	Reason         string          `json:"reason,omitempty"`
}

// LatenciesJSON are a latency's median and its value at the targets' percentile, ms.
type LatenciesJSON struct {
	P50 jsonFloat `json:"p50"`
	At  jsonFloat `json:"at_percentile"`
}

// jsonFloat writes NaN and infinities as null.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(float64(f), 'g', -1, 64)), nil
}

func layoutJSON(r planner.RankedLayout) LayoutJSON {
	l := r.Layout
	return LayoutJSON{Rank: r.Rank, Layout: l.String(), Disaggregated: l.Disaggregated(), GPUs: l.GPUs(), Workers: l.Workers, TP: l.TP,
		PrefillWorkers: l.PrefillWorkers, PrefillTP: l.PrefillTP,
		TTFT:     LatenciesJSON{P50: jsonFloat(r.TTFT.P50), At: jsonFloat(r.TTFT.At)},
		ITL:      LatenciesJSON{P50: jsonFloat(r.ITL.P50), At: jsonFloat(r.ITL.At)},
		Requests: r.Requests, Failed: r.Failed, Met: r.Met, Attainment: r.Attainment, DurationS: r.DurationS, Goodput: r.Goodput,
		Verdict: r.Verdict, MeetsTargets: r.MeetsTargets, Reason: r.Reason}
}

// report builds the report of a search.
func (o *Options) report(s *setup, res *searchResult) *Report {
	t := o.targets()
	rep := &Report{Workload: s.workload, Requests: len(s.reqs), SpanS: s.span.Seconds(), Profile: o.Profile, Model: s.card.GetModel(),
		GPUs: o.GPUs, TensorParallelSizes: s.sizes, Targets: TargetsJSON{TTFTMs: t.TTFTMs, ITLMs: t.ITLMs, Percentile: t.Percentile},
		Layouts: res.layouts, Verdicts: map[string]int{}, SearchS: res.wall.Seconds()}
	w := res.windows[0]
	rep.Sample = SampleJSON{Whole: whole(res.windows, len(s.reqs)), Windows: len(res.windows), Requests: len(w.reqs) - w.warm, Warmup: w.warm}
	for v, n := range planner.CountVerdicts(res.ranked) {
		rep.Verdicts[v.String()] = n
	}
	for _, r := range res.ranked {
		if r.Rank > 0 {
			rep.Evaluated++
			if r.Rank <= o.Top {
				rep.Top = append(rep.Top, layoutJSON(r))
			}
		}
	}
	rep.Best, rep.MeetsTargets = rep.Top[0], rep.Top[0].MeetsTargets
	return rep
}

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// printReport writes the table of the top layouts, the losers' reasons summarised and
// the verification.
// gpuCount is "1 GPU" or "n GPUs".
func gpuCount(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

func printReport(w io.Writer, rep *Report) {
	pct := "p" + strconv.FormatFloat(rep.Targets.Percentile, 'f', -1, 64)
	fmt.Fprintf(w, "%s on at most %s, targets TTFT %s ≤ %s ms, ITL %s ≤ %s ms (each request's mean gap)\n",
		rep.Workload, gpuCount(rep.GPUs), pct, num(rep.Targets.TTFTMs), pct, num(rep.Targets.ITLMs))
	how := "the whole workload"
	if !rep.Sample.Whole {
		how = fmt.Sprintf("%d windows of %d requests", rep.Sample.Windows, rep.Sample.Requests)
	}
	fmt.Fprintf(w, "%d layouts, %d simulated (predictions from %s) in %.1f s\n\n", rep.Layouts, rep.Evaluated, how, rep.SearchS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rank\tlayout\tGPUs\tTTFT p50/%s ms\tITL p50/%s ms\ton target\tgoodput req/s/GPU\tverdict\n", pct, pct)
	for _, l := range rep.Top {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s / %s\t%s / %s\t%.1f%%\t%.4g\t%s\n", l.Rank, l.Layout, l.GPUs, num(float64(l.TTFT.P50)), num(float64(l.TTFT.At)),
			num(float64(l.ITL.P50)), num(float64(l.ITL.At)), 100*l.Attainment, l.Goodput, verdictText(l))
	}
	tw.Flush()
	if !rep.MeetsTargets {
		fmt.Fprintf(w, "\nno layout of at most %s meets the targets; the best misses: %s\n", gpuCount(rep.GPUs), rep.Best.Reason)
	}
	fmt.Fprintf(w, "\nwhy the others lost: %s\n", verdictSummary(rep.Verdicts))
	if v := rep.Verify; v != nil {
		printVerify(w, rep, v)
	}
}

// verdictText is the verdict column: the verdict, and the reason of a loss.
func verdictText(l LayoutJSON) string {
	if l.Reason == "" || l.Verdict == planner.VerdictLowerGoodput { // the goodput column says it
		return l.Verdict.String()
	}
	return l.Verdict.String() + ": " + l.Reason
}

// verdictSummary counts the losers by verdict ("12 misses-ttft, 3 lower-goodput, ...").
func verdictSummary(m map[string]int) string {
	var parts []string
	for _, v := range planner.Verdicts {
		if v == planner.VerdictBest || m[v.String()] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s", m[v.String()], v))
	}
	if len(parts) == 0 {
		return "none lost"
	}
	return strings.Join(parts, ", ")
}

// num writes a figure in ms with three significant digits (whole numbers from 100),
// "-" for no sample.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// applyText is --apply's output for the best layout: its command lines (flags) or its
// Kubernetes values (helm).
func (o *Options) applyText(s *setup, best planner.RankedLayout) string {
	if o.Apply == "helm" {
		return o.helmValues(s, best)
	}
	return o.commandLines(s, best)
}

// serveArgs are `turbine serve`'s flags for layout l with mock engines that play the
// profile's engines (--mocker-profile, --mocker-tensor-parallel-size): the layout, the
// engines' limits (the profile entry's KV blocks and max sequences, its block size, the
// context length and step size) and the routing policy. ok is false for a disaggregated
// layout whose pools differ in size: one serve runs one engine configuration.
func (o *Options) serveArgs(s *setup, l planner.Layout, profile string) (args []string, ok bool) {
	if l.Disaggregated() && l.PrefillTP != l.TP {
		return nil, false
	}
	e, _ := s.profile.ForTP(l.TP)
	it := strconv.Itoa
	if l.Disaggregated() {
		args = []string{"--workers", "0", "--prefill-workers", it(l.PrefillWorkers), "--decode-workers", it(l.Workers)}
	} else {
		args = []string{"--workers", it(l.Workers)}
	}
	args = append(args, "--model", s.card.GetModel(), "--mocker-profile", profile, "--mocker-tensor-parallel-size", it(l.TP),
		"--block-size", it(s.profile.BlockSize), "--num-gpu-blocks", it(e.KVBlocks), "--max-num-seqs", it(e.MaxNumSeqs),
		"--max-model-len", it(s.maxModel), "--max-num-batched-tokens", it(s.batched), "--router-mode", o.RouterMode)
	if l.Disaggregated() {
		args = append(args, "--kv-bytes-per-token", strconv.FormatInt(s.kvBytes, 10),
			"--kv-transfer-bandwidth", strconv.FormatFloat(o.KVTransferBandwidth, 'g', -1, 64))
	}
	return args, true
}

// nodeArgs are `turbine node`'s flags for each pool of l: role and workers, and the
// engine: the profile's real engine on tensor-parallel-size GPUs each, or mock engines
// playing the profile's entry of the pool's size (they take no GPU).
func (o *Options) nodeArgs(s *setup, l planner.Layout) [][]string {
	it := strconv.Itoa
	pool := func(role string, n, tp int) []string {
		args := []string{"--worker-role", role, "--workers", it(n), "--model", s.card.GetModel()}
		if eng := s.profile.Engine; eng != "" && eng != "mocker" {
			args = append([]string{"--engine", eng}, append(args, "--tensor-parallel-size", it(tp))...)
		} else {
			args = append(args, "--mocker-profile", o.Profile, "--mocker-tensor-parallel-size", it(tp))
		}
		return append(args, "--max-model-len", it(s.maxModel))
	}
	if !l.Disaggregated() {
		return [][]string{pool("aggregated", l.Workers, l.TP)}
	}
	return [][]string{pool("prefill", l.PrefillWorkers, l.PrefillTP), pool("decode", l.Workers, l.TP)}
}

// commandLines writes the best layout's command lines: one `turbine serve` (mock engines
// playing the profile, in one process) and, for a cluster, one `turbine node` per pool.
func (o *Options) commandLines(s *setup, best planner.RankedLayout) string {
	var b strings.Builder
	l := best.Layout
	fmt.Fprintf(&b, "# turbine configure: best layout %s (%s), goodput %.4g requests/s per GPU%s\n", l, gpuCount(l.GPUs()), best.Goodput,
		map[bool]string{true: "", false: " (misses the targets: " + best.Reason + ")"}[best.MeetsTargets])
	if args, ok := o.serveArgs(s, l, o.Profile); ok {
		fmt.Fprintf(&b, "# in one process, mock engines playing the profile:\nturbine serve %s\n", shellJoin(args))
	} else {
		fmt.Fprintf(&b, "# turbine serve runs one engine configuration: TP%d prefill and TP%d decode engines need turbine node per pool\n", l.PrefillTP, l.TP)
	}
	fmt.Fprintf(&b, "# on a cluster, each pool's workers over nodes with free GPUs:\n")
	for _, args := range o.nodeArgs(s, l) {
		fmt.Fprintf(&b, "turbine node %s\n", shellJoin(args))
	}
	return b.String()
}

// shellJoin joins arguments for a shell, quoting those that need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+,", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// helmValues writes the best layout as Kubernetes values (docs/reference.md §27.6): the
// model, its context length, the GPUs and the layout, and per pool in use (aggregated,
// or prefill and decode) its replicas, the tensor-parallel size of each worker and the
// GPUs each pod requests. Strings are written
// as JSON strings, which YAML reads as they are.
func (o *Options) helmValues(s *setup, best planner.RankedLayout) string {
	var b strings.Builder
	l := best.Layout
	q := func(v string) string { j, _ := json.Marshal(v); return string(j) }
	fmt.Fprintf(&b, "# turbine configure: best layout %s, %s, goodput %.4g requests/s per GPU\n", l, gpuCount(l.GPUs()), best.Goodput)
	fmt.Fprintf(&b, "model: %s\nmaxModelLen: %d\ngpus: %d\nlayout: %s\npools:\n", q(s.card.GetModel()), s.maxModel, l.GPUs(), q(l.String()))
	pool := func(name string, n, tp int) {
		fmt.Fprintf(&b, "  %s:\n    replicas: %d\n    tensorParallelSize: %d\n    resources:\n      limits:\n        nvidia.com/gpu: %d\n", name, n, tp, tp)
	}
	pools := []struct {
		name  string
		n, tp int
	}{{"aggregated", l.Workers, l.TP}}
	if l.Disaggregated() {
		pools = []struct {
			name  string
			n, tp int
		}{{"prefill", l.PrefillWorkers, l.PrefillTP}, {"decode", l.Workers, l.TP}}
	}
	for _, p := range pools {
		pool(p.name, p.n, p.tp)
	}
	return b.String()
}
