package bench

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Summary is a run's report, written as JSON. Its counts are of the requests sent (a run
// stopped early reports those not sent in NotSent alone). Latencies are in milliseconds
// and cover the requests that succeeded; throughputs count successful requests and their
// tokens.
type Summary struct {
	Label    string `json:"label"`    // names the run in comparisons
	Workload string `json:"workload"` // what was sent
	URL      string `json:"url"`
	Model    string `json:"model"`

	Requests  int            `json:"requests"` // sent: Succeeded + Failed
	Succeeded int            `json:"succeeded"`
	Failed    int            `json:"failed"`
	Errors    map[string]int `json:"errors"` // failures by kind
	// NotSent counts the workload's requests never sent because the run was stopped
	// (SIGINT, SIGTERM) first (Outcome.NotSent); absent when 0.
	NotSent int `json:"not_sent,omitempty"`

	DurationS         float64 `json:"duration_s"`          // first send → last answer
	RequestThroughput float64 `json:"request_throughput"`  // successful requests/s
	OutputThroughput  float64 `json:"output_tokens_per_s"` // output tokens of successful requests/s
	InputTokens       int64   `json:"input_tokens"`        // prompt tokens of successful requests
	OutputTokens      int64   `json:"output_tokens"`       // output tokens of successful requests

	TTFT Dist `json:"ttft_ms"`
	ITL  Dist `json:"itl_ms"`
	E2E  Dist `json:"e2e_ms"`

	// PrefixCacheHitRate is cached / prompt tokens over the successful requests whose
	// usage reported prompt_tokens_details.cached_tokens; null when none did.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	PromptTokens       int64    `json:"prompt_tokens"` // of those requests
	CachedTokens       int64    `json:"cached_tokens"` // of those requests
	// PrefixHitRateByTier splits the engines' prefix hits by where the tokens were found:
	// "gpu" (the engine's own cache), "host" and "disk" (the node's KV block manager,
	// loaded instead of computed; docs/reference.md §9), each over the prompt tokens the
	// engines looked up at admissions (vllm:prefix_cache_queries; a preempted request
	// counts again). Set from the engines' counters (a simulation's); absent otherwise.
	PrefixHitRateByTier map[string]float64 `json:"prefix_hit_rate_by_tier,omitempty"`
	// HitRateCeiling is the workload's Ceiling: the hit rate an infinite prefix cache
	// would reach (trace workloads; absent otherwise).
	HitRateCeiling *float64 `json:"hit_rate_ceiling,omitempty"`
	// HitRateCeilingPooled is the workload's CeilingPooled: the hit rate one LRU cache
	// of PooledCacheTokens tokens, every engine's KV blocks together, would reach. Set
	// where the fleet is known (a simulation, a comparison's serves) with
	// HitRateCeiling; absent otherwise.
	HitRateCeilingPooled *float64 `json:"hit_rate_ceiling_pooled,omitempty"`
	PooledCacheTokens    int64    `json:"pooled_cache_tokens,omitempty"`
	// DisaggDecisions counts the routes of a disaggregated fleet (a request's first
	// route, and those of its migrations and prefill retries) by the router's decision
	// ("remote", "local_short_prefill", ...); simulations only, nil otherwise.
	DisaggDecisions map[string]int `json:"disagg_decisions,omitempty"`
	// Kills are the workers a simulation was told to kill (--kill-worker), in the order
	// given, each saying whether it was; nil otherwise.
	Kills []Kill `json:"kills,omitempty"`
	// Migrations counts requests moved to another worker after a fault, and
	// PrefillRetries failed prefill legs routed again, by fault ("worker_terminated",
	// "kv_transfer", ...); simulations only, nil when there were none.
	Migrations     map[string]int `json:"migrations,omitempty"`
	PrefillRetries map[string]int `json:"prefill_retries,omitempty"`
	// Lora reports the requests that named a LoRA adapter (Request.Lora); absent when
	// none did.
	Lora *LoraSummary `json:"lora,omitempty"`
	// Intervals cuts the run into intervals checked against latency targets
	// (--interval-report; intervals.go); absent otherwise.
	Intervals *IntervalReport `json:"intervals,omitempty"`
	// Fleet is an autoscaled run's pools over time (a simulation with a planner, or a
	// run that polled the service's planner; fleet.go); absent otherwise.
	Fleet *FleetReport `json:"fleet,omitempty"`

	// TTFTCDF and ITLCDF are the 0th, 1st, …, 100th percentiles (ms), for plots.
	TTFTCDF []float64 `json:"ttft_cdf_ms"`
	ITLCDF  []float64 `json:"itl_cdf_ms"`
	// Throughput is output tokens/s (every token-bearing frame received, failed requests
	// included) in consecutive buckets of ThroughputBucketS from the start of the run.
	ThroughputBucketS float64   `json:"throughput_bucket_s"`
	Throughput        []float64 `json:"throughput_tokens_per_s"`
}

// Kill is one worker a simulation was told to kill.
type Kill struct {
	Worker string  `json:"worker"`
	AtS    float64 `json:"at_s"` // seconds after the first arrival
	// Killed: it was. A kill due after every request had ended is not: the run ended
	// first.
	Killed bool `json:"killed"`
}

// throughputBuckets is how many buckets the throughput series has.
const throughputBuckets = 60

// Summarize reports an outcome.
func Summarize(o Outcome) Summary {
	s := Summary{Requests: len(o.Results), Errors: map[string]int{}, DurationS: o.Duration.Seconds(), NotSent: o.NotSent}
	var ttft, itl, e2e []float64
	var known bool
	for _, r := range o.Results {
		if r.Error != "" {
			s.Failed++
			s.Errors[r.Error]++
			continue
		}
		s.Succeeded++
		s.InputTokens += int64(r.InputLength)
		s.OutputTokens += int64(r.OutputTokens)
		ttft = append(ttft, ms(r.TTFT))
		e2e = append(e2e, ms(r.E2E))
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
		if r.CachedKnown {
			known = true
			s.PromptTokens += int64(r.PromptTokens)
			s.CachedTokens += int64(r.CachedTokens)
		}
	}
	s.TTFT, s.ITL, s.E2E = Describe(ttft), Describe(itl), Describe(e2e)
	s.TTFTCDF, s.ITLCDF = quantiles(ttft), quantiles(itl)
	s.Lora = summarizeLora(o.Results)
	if known && s.PromptTokens > 0 {
		rate := float64(s.CachedTokens) / float64(s.PromptTokens)
		s.PrefixCacheHitRate = &rate
	}
	if o.Duration > 0 {
		s.RequestThroughput = float64(s.Succeeded) / o.Duration.Seconds()
		s.OutputThroughput = float64(s.OutputTokens) / o.Duration.Seconds()
		s.ThroughputBucketS, s.Throughput = throughput(o)
	}
	return s
}

// throughput buckets the arrival times of every token-bearing frame.
func throughput(o Outcome) (bucketS float64, perS []float64) {
	bucket := max(o.Duration/throughputBuckets, time.Millisecond)
	n := int(o.Duration/bucket) + 1
	counts := make([]float64, n)
	for _, r := range o.Results {
		if r.TTFT == 0 {
			continue
		}
		t := r.Start + r.TTFT
		counts[min(int(t/bucket), n-1)]++
		for _, g := range r.ITL {
			t += g
			counts[min(int(t/bucket), n-1)]++
		}
	}
	for i := range counts {
		counts[i] /= bucket.Seconds()
	}
	return bucket.Seconds(), counts
}

// WriteSummary writes s as indented JSON.
func WriteSummary(w io.Writer, s Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// Limits of a summary ReadSummary accepts: far above what WriteSummary writes (a few kB,
// 101 points per CDF, throughputBuckets+1 throughput buckets), so that a damaged or
// foreign file fails with an error instead of exhausting memory or a plot's axes.
const (
	MaxSummaryBytes     = 16 << 20 // bytes of JSON
	MaxThroughputPoints = 10_000   // throughput_tokens_per_s entries
	// MaxSummaryMillis bounds every CDF value (ms, about 31.7 years) and MaxSummaryRate
	// every throughput value (tokens/s).
	MaxSummaryMillis = 1e12
	MaxSummaryRate   = 1e12
)

// minBucket is the narrowest throughput bucket Summarize makes.
const minBucket = time.Millisecond

// ReadSummary reads a summary written by WriteSummary and refuses one it could not have
// written. Errors name the source and, for a summary that is JSON, the field: longer
// than MaxSummaryBytes; not JSON, or JSON other than an object; no requests field;
// counts that are negative or do not add up (succeeded + failed = requests, errors by
// kind summing to failed); a label that is not valid UTF-8 or has a control character
// (CheckLabel); a CDF of other than 0 or 101 points, or whose points are not
// non-decreasing numbers from 0 to MaxSummaryMillis; more than MaxThroughputPoints
// throughput buckets, or a value that is negative, not finite or above MaxSummaryRate;
// a throughput_bucket_s other than 0 without buckets, or outside 1 ms to MaxArrival with
// them.
func ReadSummary(r io.Reader, name string) (Summary, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSummaryBytes+1))
	if err != nil {
		return Summary{}, fmt.Errorf("bench: %s: %v", name, err)
	}
	if len(data) > MaxSummaryBytes {
		return Summary{}, fmt.Errorf("bench: %s: larger than %d MiB: not a benchmark summary", name, MaxSummaryBytes>>20)
	}
	// The fields as given, to tell an absent field from a zero one.
	var fields map[string]json.RawMessage
	var typeErr *json.UnmarshalTypeError
	switch err := json.Unmarshal(data, &fields); {
	case errors.As(err, &typeErr):
		return Summary{}, fmt.Errorf("bench: %s: a JSON %s: not a benchmark summary (want a JSON object)", name, typeErr.Value)
	case err != nil:
		return Summary{}, fmt.Errorf("bench: %s: not a benchmark summary: %v", name, err)
	case fields == nil:
		return Summary{}, fmt.Errorf("bench: %s: JSON null: not a benchmark summary (want a JSON object)", name)
	}
	if raw, ok := fields["requests"]; !ok || string(raw) == "null" {
		return Summary{}, fmt.Errorf("bench: %s: no requests field: not a benchmark summary", name)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return Summary{}, fmt.Errorf("bench: %s: not a benchmark summary: %v", name, err)
	}
	if raw, ok := fields["label"]; ok && !utf8.Valid(raw) {
		// Unmarshal has replaced the invalid bytes by U+FFFD: look at them as given.
		return Summary{}, fmt.Errorf("bench: %s: label: not valid UTF-8", name)
	}
	if err := s.check(); err != nil {
		return Summary{}, fmt.Errorf("bench: %s: %v", name, err)
	}
	return s, nil
}

// check checks what a summary's reader relies on: its counts, its label and the series
// a plot draws.
func (s *Summary) check() error {
	switch {
	case s.Requests < 0 || s.Succeeded < 0 || s.Failed < 0 || s.NotSent < 0:
		return fmt.Errorf("requests %d, succeeded %d, failed %d, not_sent %d: want counts >= 0", s.Requests, s.Succeeded, s.Failed, s.NotSent)
	case s.Succeeded+s.Failed != s.Requests:
		return fmt.Errorf("succeeded %d + failed %d is not requests %d", s.Succeeded, s.Failed, s.Requests)
	}
	failed := 0
	for kind, n := range s.Errors {
		if n < 1 || n > s.Failed {
			return fmt.Errorf("errors[%q] = %d: want 1 to failed (%d)", kind, n, s.Failed)
		}
		failed += n
	}
	if failed != s.Failed {
		return fmt.Errorf("errors add up to %d: want failed (%d)", failed, s.Failed)
	}
	for kind := range s.Errors {
		if err := CheckLabel(kind); err != nil {
			return fmt.Errorf("errors: kind %q: %v", kind, err)
		}
	}
	if err := CheckLabel(s.Label); err != nil {
		return fmt.Errorf("label %q: %v", s.Label, err)
	}
	for _, m := range []struct {
		field  string
		counts map[string]int
	}{{"migrations", s.Migrations}, {"prefill_retries", s.PrefillRetries}} {
		for k, n := range m.counts {
			if err := CheckLabel(k); err != nil || n < 0 {
				return fmt.Errorf("%s[%q] = %d: want a label and a count >= 0", m.field, k, n)
			}
		}
	}
	if s.Lora != nil {
		if err := s.Lora.check(s.Requests); err != nil {
			return err
		}
	}
	if s.Intervals != nil {
		if err := s.Intervals.check(); err != nil {
			return err
		}
	}
	if s.Fleet != nil {
		if err := s.Fleet.check(); err != nil {
			return err
		}
	}
	for i, k := range s.Kills {
		if err := CheckLabel(k.Worker); err != nil || k.AtS < 0 {
			return fmt.Errorf("kills[%d]: worker %q at %v s: want a label and a time >= 0", i, k.Worker, k.AtS)
		}
	}
	for _, d := range []struct {
		field string
		d     Dist
		count int // the count Summarize gives it; -1: any (ITL: gaps between tokens)
	}{{"ttft_ms", s.TTFT, s.Succeeded}, {"e2e_ms", s.E2E, s.Succeeded}, {"itl_ms", s.ITL, -1}} {
		if err := d.d.check(d.field, d.count); err != nil {
			return err
		}
	}
	return s.checkSeries()
}

// check checks a latency distribution as Describe makes it: want samples (-1: any
// number), values in milliseconds from 0 to MaxSummaryMillis, min ≤ p50 ≤ p90 ≤ p99 ≤
// max, the mean between min and max, and all zero without samples.
func (d Dist) check(field string, want int) error {
	switch {
	case d.Count < 0 || want >= 0 && d.Count != want:
		return fmt.Errorf("%s.count %d: want %d (one per successful request)", field, d.Count, want)
	case d.Count == 0 && d != Dist{}:
		return fmt.Errorf("%s: values without samples (count 0)", field)
	}
	if err := checkValues(field+" (min, p50, p90, p99, max, mean)", []float64{d.Min, d.P50, d.P90, d.P99, d.Max, d.Mean}, MaxSummaryMillis); err != nil {
		return err
	}
	const slack = 1e-9 // the mean's rounding
	if !(d.Min <= d.P50 && d.P50 <= d.P90 && d.P90 <= d.P99 && d.P99 <= d.Max) ||
		d.Mean < d.Min*(1-slack) || d.Mean > d.Max*(1+slack) {
		return fmt.Errorf("%s: min %v, p50 %v, p90 %v, p99 %v, max %v, mean %v: want min ≤ p50 ≤ p90 ≤ p99 ≤ max and the mean between min and max",
			field, d.Min, d.P50, d.P90, d.P99, d.Max, d.Mean)
	}
	return nil
}

// checkSeries checks the series a plot draws.
func (s *Summary) checkSeries() error {
	for _, c := range []struct {
		field string
		xs    []float64
	}{{"ttft_cdf_ms", s.TTFTCDF}, {"itl_cdf_ms", s.ITLCDF}} {
		if len(c.xs) != 0 && len(c.xs) != 101 {
			return fmt.Errorf("%s has %d points: want 101 (the 0th to 100th percentiles) or none", c.field, len(c.xs))
		}
		if err := checkValues(c.field, c.xs, MaxSummaryMillis); err != nil {
			return err
		}
		for i := 1; i < len(c.xs); i++ {
			if c.xs[i] < c.xs[i-1] {
				return fmt.Errorf("%s[%d] = %v is below %s[%d] = %v: want percentiles in non-decreasing order",
					c.field, i, c.xs[i], c.field, i-1, c.xs[i-1])
			}
		}
	}
	if n := len(s.Throughput); n > MaxThroughputPoints {
		return fmt.Errorf("throughput_tokens_per_s has %d points: want at most %d", n, MaxThroughputPoints)
	}
	switch b := s.ThroughputBucketS; {
	case len(s.Throughput) == 0 && b != 0:
		return fmt.Errorf("throughput_bucket_s %v without throughput_tokens_per_s: want 0", b)
	case len(s.Throughput) > 0 && !(b >= minBucket.Seconds() && b <= MaxArrival.Seconds()):
		return fmt.Errorf("throughput_bucket_s %v: want a number of seconds from %v to %v", b, minBucket.Seconds(), MaxArrival.Seconds())
	}
	return checkValues("throughput_tokens_per_s", s.Throughput, MaxSummaryRate)
}

// checkValues fails on a value of xs that is not from 0 to most.
func checkValues(field string, xs []float64, most float64) error {
	for i, x := range xs {
		if !(x >= 0 && x <= most) {
			return fmt.Errorf("%s[%d] = %v: want a number from 0 to %g", field, i, x, most)
		}
	}
	return nil
}

// CheckLabel checks a run's label (--label, a summary's label): it must be valid UTF-8
// without control characters (Unicode category Cc: C0, DEL, C1), which a plot or a
// terminal could not show and SVG (XML) cannot hold.
func CheckLabel(label string) error {
	if !utf8.ValidString(label) {
		return errors.New("not valid UTF-8")
	}
	if i := strings.IndexFunc(label, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(label[i:])
		return fmt.Errorf("has a control character (%U at byte %d)", r, i)
	}
	return nil
}

// CSVHeader is the header of the per-request CSV (times in milliseconds).
var CSVHeader = []string{"index", "start_ms", "ttft_ms", "itl_mean_ms", "e2e_ms", "input_tokens",
	"prompt_tokens", "cached_tokens", "output_tokens", "error", "detail", "lora"}

// WriteCSV writes one row per result under CSVHeader. cached_tokens is empty when the
// server did not report it; ttft_ms and itl_mean_ms are empty when there was no token;
// lora is the LoRA adapter the request named (empty for the base model).
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	for _, r := range results {
		ttft, itl, cached := "", "", ""
		if r.TTFT > 0 {
			ttft = f(ms(r.TTFT))
		}
		if len(r.ITL) > 0 {
			var sum time.Duration
			for _, g := range r.ITL {
				sum += g
			}
			itl = f(ms(sum) / float64(len(r.ITL)))
		}
		if r.CachedKnown {
			cached = strconv.Itoa(r.CachedTokens)
		}
		row := []string{strconv.Itoa(r.Index), f(ms(r.Start)), ttft, itl, f(ms(r.E2E)), strconv.Itoa(r.InputLength),
			strconv.Itoa(r.PromptTokens), cached, strconv.Itoa(r.OutputTokens), r.Error, strings.ReplaceAll(r.Detail, "\n", " "), r.Lora}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
