package bench

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// DefaultBlockTokens is the Mooncake trace's block size: one hash id per 512 prompt tokens.
const DefaultBlockTokens = 512

// Request is one request of a workload.
type Request struct {
	Arrival      time.Duration // offset from the start of the run
	InputLength  int           // prompt tokens
	OutputLength int           // tokens to generate (max_tokens, with ignore_eos)
	// HashIDs holds one id per block of the prompt, prefix-chained: two requests share
	// their first k blocks of tokens exactly when their first k ids are equal.
	HashIDs []int64
	// PrefixTokens > 0 makes the prompt's first PrefixTokens tokens the shared prefix of
	// group PrefixID (a synthetic workload's shared prefix, SyntheticSpec): its whole
	// blocks are HashIDs[:PrefixTokens/blockTokens], the same ids in every request of
	// the group, and its remainder, the first PrefixTokens%blockTokens tokens of the
	// next block (a block of the request's own), is synthesized from PrefixID. Requests
	// with the same PrefixID therefore share exactly PrefixTokens leading tokens, however
	// the prefix falls on blocks. 0: no such prefix (traces).
	PrefixTokens int
	PrefixID     int64
	// Lora names the LoRA adapter the request runs with ("" for the base model; a
	// trace names none: AssignLoras, LoraSpec). A real run sends it as the request's
	// model; its KV differs from the base model's and from every other adapter's even
	// where the hash ids are equal.
	Lora string
}

// MaxArrival bounds a request's arrival, its offset from the start of a run: 30 days,
// far beyond any trace replay or synthetic run, and far inside time.Duration's range
// (292 years), so that an arrival plus the latencies after it cannot overflow. The trace
// readers, Scale and the synthetic workloads (Synthetic, SyntheticSpec) refuse
// arrivals beyond it.
const MaxArrival = 30 * 24 * time.Hour

// MaxTraceLine is the longest line of a Mooncake trace ReadMooncake reads, in bytes
// (64 MiB: a line of 120 k-token prompt has about 250 hash ids, a few kB).
const MaxTraceLine = 64 << 20

// maxArrivalMillis is MaxArrival in ms, a Mooncake timestamp's unit.
const maxArrivalMillis = float64(MaxArrival / time.Millisecond)

// mooncakeLine is one line of a Mooncake trace.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`     // ms from the trace start
	InputLength  int      `json:"input_length"`  // tokens
	OutputLength int      `json:"output_length"` // tokens
	HashIDs      []int64  `json:"hash_ids"`
}

// ReadMooncake reads a Mooncake JSONL trace (timestamp in ms, input_length,
// output_length, hash_ids with one id per blockTokens tokens) from r, at most limit
// requests (0: all). Blank lines are skipped. input_length and output_length must be
// positive (a request generates at least one token). Timestamps must not go backwards (a
// line's may equal the previous request's) and must be at most MaxArrival; lines may be
// at most MaxTraceLine bytes long. One leading UTF-8 byte order mark is skipped. Errors
// name the source and line.
func ReadMooncake(r io.Reader, name string, blockTokens, limit int) ([]Request, error) {
	if blockTokens < 1 {
		return nil, fmt.Errorf("bench: block size %d tokens: want at least 1", blockTokens)
	}
	var out []Request
	sc := bufio.NewScanner(skipBOM(r))
	sc.Buffer(make([]byte, 0, 1<<20), MaxTraceLine)
	line := 0                  // the last line read
	prevLine, prevMS := 0, 0.0 // the previous request's line and timestamp
	for (limit <= 0 || len(out) < limit) && sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			return nil, fmt.Errorf("bench: %s:%d: %v", name, line, err)
		}
		if err := m.check(blockTokens); err != nil {
			return nil, fmt.Errorf("bench: %s:%d: %v", name, line, err)
		}
		if *m.Timestamp < prevMS {
			return nil, fmt.Errorf("bench: %s:%d: timestamp %v ms is earlier than line %d's %v ms: want the requests in arrival order",
				name, line, *m.Timestamp, prevLine, prevMS)
		}
		prevLine, prevMS = line, *m.Timestamp
		out = append(out, Request{
			Arrival:      time.Duration(*m.Timestamp * float64(time.Millisecond)),
			InputLength:  m.InputLength,
			OutputLength: m.OutputLength,
			HashIDs:      m.HashIDs,
		})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("bench: %s:%d: line longer than %d MiB, the most a trace line may have", name, line+1, MaxTraceLine>>20)
		}
		return nil, fmt.Errorf("bench: %s:%d: %v", name, line+1, err)
	}
	return out, nil
}

func (m mooncakeLine) check(blockTokens int) error {
	switch {
	case m.Timestamp == nil:
		return errors.New("no timestamp")
	case *m.Timestamp < 0:
		return fmt.Errorf("timestamp %v ms: want >= 0", *m.Timestamp)
	case *m.Timestamp > maxArrivalMillis:
		return fmt.Errorf("timestamp %v ms: want at most %.0f ms (%v from the trace start)", *m.Timestamp, maxArrivalMillis, MaxArrival)
	case m.InputLength <= 0:
		return fmt.Errorf("input_length %d: want > 0", m.InputLength)
	case m.OutputLength <= 0:
		return fmt.Errorf("output_length %d: want > 0 (a request generates at least one token)", m.OutputLength)
	case len(m.HashIDs) != (m.InputLength+blockTokens-1)/blockTokens:
		return fmt.Errorf("input_length %d does not match %d hash_ids of %d tokens", m.InputLength, len(m.HashIDs), blockTokens)
	}
	return nil
}

// utf8BOM is the UTF-8 encoding of U+FEFF, the byte order mark some editors write at the
// start of a text file.
const utf8BOM = "\ufeff"

// skipBOM returns r without one leading utf8BOM.
func skipBOM(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if b, err := br.Peek(len(utf8BOM)); err == nil && string(b) == utf8BOM {
		_, _ = br.Discard(len(utf8BOM))
	}
	return br
}

// azureLayout is the Azure trace's TIMESTAMP format (fractional seconds of any length).
const azureLayout = "2006-01-02 15:04:05.999999999"

// ReadAzure reads an Azure LLM inference trace (CSV with a header naming TIMESTAMP,
// ContextTokens and GeneratedTokens, in any order and case) from r, at most limit
// requests (0: all). ContextTokens and GeneratedTokens must be positive integers (a
// request generates at least one token). Arrivals are offsets from the first row's
// timestamp: rows must not go backwards in time (a row's TIMESTAMP may equal the
// previous row's) and must lie at most MaxArrival after the first. The trace has no
// prefix information, so every prompt gets blocks of its own (blockTokens tokens each)
// that no other request shares. One leading UTF-8 byte order mark (as Excel's "CSV
// UTF-8" writes) is skipped. Errors name the source and line.
func ReadAzure(r io.Reader, name string, blockTokens, limit int) ([]Request, error) {
	if blockTokens < 1 {
		return nil, fmt.Errorf("bench: block size %d tokens: want at least 1", blockTokens)
	}
	cr := csv.NewReader(skipBOM(r))
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("bench: %s: header: %v", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	iTime, ok1 := col["timestamp"]
	iCtx, ok2 := col["contexttokens"]
	iGen, ok3 := col["generatedtokens"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("bench: %s: header %q: want TIMESTAMP, ContextTokens and GeneratedTokens columns", name, header)
	}
	var out []Request
	var first, prev time.Time
	prevLine := 0
	ids := newIDSource()
	for line := 2; limit <= 0 || len(out) < limit; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bench: %s:%d: %v", name, line, err)
		}
		ts, err := time.Parse(azureLayout, strings.TrimSpace(rec[iTime]))
		if err != nil {
			return nil, fmt.Errorf("bench: %s:%d: TIMESTAMP %q: want %s", name, line, rec[iTime], azureLayout)
		}
		in, err1 := strconv.Atoi(strings.TrimSpace(rec[iCtx]))
		gen, err2 := strconv.Atoi(strings.TrimSpace(rec[iGen]))
		if err1 != nil || in <= 0 {
			return nil, fmt.Errorf("bench: %s:%d: ContextTokens %q: want a positive integer", name, line, rec[iCtx])
		}
		if err2 != nil || gen <= 0 {
			return nil, fmt.Errorf("bench: %s:%d: GeneratedTokens %q: want a positive integer (a request generates at least one token)", name, line, rec[iGen])
		}
		if len(out) == 0 {
			first, prev = ts, ts
		}
		if ts.Before(prev) {
			return nil, fmt.Errorf("bench: %s:%d: TIMESTAMP %s is earlier than line %d's (%s): want the rows in arrival order",
				name, line, strings.TrimSpace(rec[iTime]), prevLine, prev.Format(azureLayout))
		}
		if at := ts.Sub(first); at > MaxArrival { // Sub saturates: no overflow
			return nil, fmt.Errorf("bench: %s:%d: TIMESTAMP %s is %v after the first row's (%s): want at most %v",
				name, line, strings.TrimSpace(rec[iTime]), at, first.Format(azureLayout), MaxArrival)
		}
		prev, prevLine = ts, line
		out = append(out, Request{Arrival: ts.Sub(first), InputLength: in, OutputLength: gen, HashIDs: ids.next(in, blockTokens)})
	}
	return out, nil
}

// Synthetic returns n requests of isl prompt tokens and osl output tokens with prompts
// that share nothing. rate > 0 (at least MinRate) gives Poisson arrivals of that many
// requests per second drawn from rng; rate == 0 makes them all arrive at once (a closed
// loop, paced by the runner's concurrency). An arrival drawn beyond MaxArrival is an
// error. SyntheticSpec describes the general case: drawn lengths, shared prefixes, a
// duration.
func Synthetic(n, isl, osl, blockTokens int, rate float64, rng *rand.Rand) ([]Request, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("bench: %d requests: want at least 1", n)
	case isl < 1:
		return nil, fmt.Errorf("bench: input length %d: want at least 1", isl)
	case osl < 0:
		return nil, fmt.Errorf("bench: output length %d: want >= 0", osl)
	case blockTokens < 1:
		return nil, fmt.Errorf("bench: block size %d tokens: want at least 1", blockTokens)
	}
	if err := checkRate(rate); err != nil {
		return nil, err
	}
	out := make([]Request, n)
	ids := newIDSource()
	var at float64 // seconds
	for i := range out {
		if rate > 0 && i > 0 {
			at += rng.ExpFloat64() / rate
		}
		arrival, err := arrivalAt(at, i, rate)
		if err != nil {
			return nil, err
		}
		out[i] = Request{Arrival: arrival, InputLength: isl, OutputLength: osl, HashIDs: ids.next(isl, blockTokens)}
	}
	return out, nil
}

// arrivalAt converts request i's drawn arrival, at seconds from the start under rate
// requests/s, to a Request.Arrival; an arrival beyond MaxArrival is an error that says
// so and names the rate.
func arrivalAt(at float64, i int, rate float64) (time.Duration, error) {
	if !(at <= MaxArrival.Seconds()) {
		return 0, fmt.Errorf("bench: rate %v requests/s: request %d would arrive %.4g s after the start, beyond the %v limit: raise the rate or send fewer requests (%w)",
			rate, i, at, MaxArrival, ErrLateArrival)
	}
	return time.Duration(at * float64(time.Second)), nil
}

// Scale multiplies every arrival by factor (0.5 replays twice as fast). Errors, with
// reqs left unchanged: a factor that is not positive and finite, or a scaled arrival
// beyond MaxArrival (the error names the first such request by its index in reqs).
func Scale(reqs []Request, factor float64) error {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return fmt.Errorf("bench: time scale %v: want a positive number", factor)
	}
	for i, r := range reqs {
		if at := r.Arrival.Seconds() * factor; at > MaxArrival.Seconds() {
			return fmt.Errorf("bench: time scale %v: request %d (arrival %v) would arrive %.4g s after the start, beyond the %v limit (%w)",
				factor, i, r.Arrival, at, MaxArrival, ErrLateArrival)
		}
	}
	for i := range reqs {
		reqs[i].Arrival = time.Duration(float64(reqs[i].Arrival) * factor)
	}
	return nil
}

// idSource hands out hash ids above any a Mooncake trace uses, so that synthesized
// prompts of traces without prefix information share no block.
type idSource struct{ n int64 }

func newIDSource() *idSource { return &idSource{n: 1 << 48} }

func (s *idSource) next(tokens, blockTokens int) []int64 {
	ids := make([]int64, (tokens+blockTokens-1)/blockTokens)
	for i := range ids {
		ids[i] = s.n
		s.n++
	}
	return ids
}
