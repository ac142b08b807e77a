package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/turbine-llm/turbine/bench"
)

// setInt is an int flag that records that it was given (on the command line or by its
// environment variable), so that a default can be told from an explicit value.
type setInt struct {
	n   *int
	set *bool
}

func (v setInt) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

func (v setInt) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, strconv.IntSize)
	if err != nil {
		return errors.New("want an integer")
	}
	*v.n, *v.set = int(n), true
	return nil
}

// lengths parses --isl and --osl; errors name the flag and quote the bad part.
func (o *Options) lengths() (isl, osl bench.Length, err error) {
	if isl, err = bench.ParseLength(o.ISL); err != nil {
		return isl, osl, fmt.Errorf("--isl %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	if osl, err = bench.ParseLength(o.OSL); err != nil {
		return isl, osl, fmt.Errorf("--osl %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	return isl, osl, nil
}

// validateSynthetic checks the flags of a synthetic workload; errors name the flags.
func (o *Options) validateSynthetic() error {
	isl, osl, err := o.lengths()
	if err != nil {
		return err
	}
	switch {
	case o.Duration < 0:
		return fmt.Errorf("--duration %v: want > 0 (or 0: --requests governs)", o.Duration)
	case o.Duration > bench.MaxArrival:
		return fmt.Errorf("--duration %v: want at most %v", o.Duration, bench.MaxArrival)
	case o.Duration > 0 && o.RequestsSet:
		return fmt.Errorf("--requests %d and --duration %v: give one (--duration sends until then, --requests that many)", o.Requests, o.Duration)
	case o.Duration == 0 && o.Requests < 1:
		return fmt.Errorf("--requests %d: want at least 1", o.Requests)
	case o.Duration == 0 && o.Requests > bench.MaxSyntheticRequests:
		return fmt.Errorf("--requests %d: want at most %d", o.Requests, bench.MaxSyntheticRequests)
	case !(o.Rate >= 0) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate %v: want >= 0", o.Rate)
	case o.Rate > 0 && o.Rate < bench.MinRate:
		return fmt.Errorf("--rate %v: want 0 or at least %g requests/s (one every 11.6 days on average; arrivals may lie at most %v after the start)",
			o.Rate, bench.MinRate, bench.MaxArrival)
	case o.Rate == 0 && o.Concurrency == 0:
		return errors.New("--rate 0 needs --concurrency: a synthetic closed loop is paced by its concurrency")
	case o.Duration > 0 && o.Rate*o.Duration.Seconds() > bench.MaxSyntheticRequests:
		return fmt.Errorf("--rate %v for --duration %v: %.0f requests expected, want at most %d", o.Rate, o.Duration, o.Rate*o.Duration.Seconds(), bench.MaxSyntheticRequests)
	case o.SharedPrefixGroups < 0 || o.SharedPrefixGroups > bench.MaxPrefixGroups:
		return fmt.Errorf("--shared-prefix-groups %d: want 0 to %d", o.SharedPrefixGroups, bench.MaxPrefixGroups)
	case o.SharedPrefixTokens < 0:
		return fmt.Errorf("--shared-prefix-tokens %d: want >= 0", o.SharedPrefixTokens)
	case o.SharedPrefixGroups > 0 && o.SharedPrefixTokens == 0:
		return fmt.Errorf("--shared-prefix-groups %d needs --shared-prefix-tokens (the prefix's length)", o.SharedPrefixGroups)
	case o.SharedPrefixTokens > 0 && o.SharedPrefixGroups == 0:
		return fmt.Errorf("--shared-prefix-tokens %d needs --shared-prefix-groups (how many prefixes)", o.SharedPrefixTokens)
	}
	if err := bench.CheckPrefixFits(isl, o.SharedPrefixTokens); err != nil {
		return fmt.Errorf("--shared-prefix-tokens %d with --isl %s: every prompt must be longer than the prefix (%s)", o.SharedPrefixTokens, o.ISL,
			strings.TrimPrefix(err.Error(), "bench: "))
	}
	if err := o.spec(isl, osl).Check(); err != nil { // a safety net: the checks above cover it
		return err
	}
	return nil
}

// spec is the synthetic workload of the options.
func (o *Options) spec(isl, osl bench.Length) bench.SyntheticSpec {
	return bench.SyntheticSpec{ISL: isl, OSL: osl, Rate: o.Rate, Requests: o.Requests, Duration: o.Duration,
		PrefixGroups: o.SharedPrefixGroups, PrefixTokens: o.SharedPrefixTokens, BlockTokens: o.BlockTokens, Seed: o.Seed,
		Lora: o.loraSpec()}
}

// generated reports whether the workload is drawn while it is sent: a synthetic closed
// loop for a duration, whose length depends on the server.
func (o *Options) generated() bool { return o.Trace == "" && o.Duration > 0 && o.Rate == 0 }

// synthetic builds the synthetic workload and names it; for a generated workload the
// requests are nil (measure draws them).
func (o *Options) synthetic() ([]bench.Request, string, error) {
	isl, osl, err := o.lengths()
	if err != nil {
		return nil, "", err
	}
	name := fmt.Sprintf("synthetic isl %s osl %s", isl, osl)
	if o.SharedPrefixGroups > 0 {
		name += fmt.Sprintf(" shared prefix %d×%d", o.SharedPrefixGroups, o.SharedPrefixTokens)
	}
	if o.Rate > 0 {
		name += fmt.Sprintf(" rate %g/s", o.Rate)
	}
	if o.Duration > 0 {
		name += fmt.Sprintf(" for %v", o.Duration)
	}
	name += o.loraWorkloadName()
	if o.Endpoint == bench.EndpointChat {
		name += " (chat)"
	}
	if o.generated() {
		return nil, name, nil
	}
	reqs, err := o.spec(isl, osl).Generate()
	if errors.Is(err, bench.ErrLateArrival) {
		_, why, _ := strings.Cut(err.Error(), "requests/s: ") // after bench's "rate R requests/s: "
		return nil, "", fmt.Errorf("--rate %v with --requests %d: %s", o.Rate, o.Requests, why)
	}
	return reqs, name, err
}

// checkGeneratedFits is Fleet.checkFits for a generated workload, whose requests are not
// known ahead: it fails when the longest prompt and output that --isl and --osl allow do
// not fit in --max-model-len. Normal and log-normal lengths have no bound to check; a
// request too long for the engines fails with the server's error.
func (o *Options) checkGeneratedFits() error {
	if !o.generated() {
		return nil
	}
	isl, osl, err := o.lengths()
	if err != nil {
		return err
	}
	in, ok1 := isl.Max()
	out, ok2 := osl.Max()
	if ok1 && ok2 && in+out > o.Fleet.MaxModelLen {
		return fmt.Errorf("--max-model-len %d: a request may need %d tokens (--isl %s, --osl %s); raise it", o.Fleet.MaxModelLen, in+out, isl, osl)
	}
	return nil
}

// runGenerated runs the generated workload's closed loop on runner for --duration and
// returns the outcome with the requests sent.
func (o *Options) runGenerated(ctx context.Context, runner *bench.Runner) (bench.Outcome, []bench.Request, error) {
	isl, osl, err := o.lengths()
	if err != nil {
		return bench.Outcome{}, nil, err
	}
	g, err := o.spec(isl, osl).Generator()
	if err != nil {
		return bench.Outcome{}, nil, err
	}
	var sent []bench.Request // drawn: the runner asks for one more than it sends
	outcome, err := runner.RunFor(ctx, func(int) bench.Request {
		r := g.Next()
		sent = append(sent, r)
		return r
	}, o.Duration)
	if err != nil {
		return bench.Outcome{}, nil, err
	}
	return outcome, sent[:len(outcome.Results)], nil
}

// hasCeiling reports whether summaries give the workload's hit-rate ceiling: traces and
// synthetic workloads with a shared prefix (without one, prompts share nothing and the
// ceiling is 0).
func (o *Options) hasCeiling() bool { return o.Trace != "" || o.SharedPrefixGroups > 0 }

// requestCount says how many requests a run of reqs sends: their number, or for a
// generated workload the closed loop that draws them.
func (o *Options) requestCount(reqs []bench.Request) string {
	if o.generated() {
		return fmt.Sprintf("a closed loop of %d in flight for %v", o.Concurrency, o.Duration)
	}
	return fmt.Sprintf("%d requests", len(reqs))
}
