package mocker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// mediumGPU is the medium of every block this engine stores (vLLM's MEDIUM_GPU).
const mediumGPU = "GPU"

// engineHashSalt derives the engine's own block hashes (published in KV events) from the
// chained sequence hashes used for lookups. Real engines' hashes differ from the router's
// (docs/reference.md §2), and so do these: consumers must treat them as opaque ids.
const engineHashSalt = 0x6b762d6576656e74

// Request is one generation request (token ids in, token ids out).
type Request struct {
	// ID must be unique among the requests in the engine.
	ID string
	// Prompt holds the prompt's token ids; at least one.
	Prompt []uint32
	// MaxTokens bounds the output tokens (>= 1); finish reason "length" when reached.
	MaxTokens int
	// MinTokens suppresses EOS and StopTokenIDs until that many tokens were generated.
	MinTokens int
	// IgnoreEOS: never generate EOS, and do not stop on it.
	IgnoreEOS bool
	// StopTokenIDs end the request (finish reason "stop", stop token reported).
	StopTokenIDs []uint32
	// Seed of the generation when HasSeed; otherwise Config.Seed.
	Seed    uint64
	HasSeed bool
	// LoraName names the LoRA adapter the request runs with ("" for the base model): it
	// changes the block hashes (kv.LoraSeed) and the generated tokens (the seed is mixed
	// with the name), and BlockStored events carry it. Add does not check that the
	// adapter is loaded (LoadLora): the server does.
	LoraName string
	// CacheSalt ("" for none) is mixed into the first block's hash as vLLM mixes it
	// (kv.FirstBlockHash): prompts under different salts share no cached block. The
	// BlockStored event of a salted first block carries it (kv.Event.CacheSalt).
	CacheSalt string
	// AllowedTokenIDs, when not empty, are the only tokens drawn words come from (vLLM's
	// allowed_token_ids); EOS ends the request only when it is among them. LogitBias
	// shifts the draw (sample.go). Neither applies to a Script's tokens.
	AllowedTokenIDs []uint32
	LogitBias       map[uint32]float64
	// Priority orders the waiting queue: a request is queued after those with the same
	// or a lower value and before those with a higher one (vLLM's priority scheduling:
	// lower runs first; 0 for all is first come, first served).
	Priority int
	// Script, when not nil, is the output to give instead of drawn words (a model's
	// answer planned by engines/mocker/persona): its tokens in order, then EOS (an empty
	// script: EOS at once). The stop rules apply to its tokens as to drawn ones: one that
	// is EOS or in StopTokenIDs ends the request, and MaxTokens truncates it (finish
	// reason "length"). With IgnoreEOS, or while fewer than MinTokens were generated,
	// drawn words follow the script instead of EOS, and before MinTokens a script token
	// that would stop the request is replaced by a word (min_tokens masks it). Timing
	// and the KV cache behave as for drawn tokens.
	Script []uint32

	// HoldBlocks makes the request the prefill leg of a disaggregated request (vLLM's
	// kv_transfer_params do_remote_decode): when it finishes on its length limit
	// (FinishLength) its blocks stay referenced ("pinned") for a decode engine to read,
	// and the finished Output lists them, until Release, Abort or the caller's timeout.
	// A request that finishes on a stop token releases its blocks at once, as vLLM's
	// NIXL connector only delays freeing for length-capped requests.
	HoldBlocks bool
	// ImportedTokens makes the request the decode leg of a disaggregated request (vLLM's
	// do_remote_prefill): that many leading prompt tokens have their KV transferred from
	// a prefill engine, so they count as computed without prefill time when the request
	// is first scheduled (beyond what the prefix cache holds). At most len(Prompt)-1
	// tokens are imported: the last prompt token is always computed locally to produce
	// the first output token, as vLLM's scheduler does after a remote KV load. The
	// imported blocks enter the prefix cache (BlockStored) like computed ones. A request
	// preempted later recomputes them.
	ImportedTokens int

	// Structured is the output constraint the request carried (structured outputs,
	// docs/reference.md §16), read from each dialect's fields by the server; nil for free
	// text. The engine core does not read it.
	Structured *messages.StructuredOutput

	// Logprobs, when not nil, asks for the logprobs of each output token and of the
	// *Logprobs (0..MaxLogprobs) most likely tokens at its position (Output.Logprobs);
	// PromptLogprobs the same for the prompt's tokens (Output.PromptLogprobs, on the
	// first output). See logprobs.go for the distribution they follow.
	Logprobs, PromptLogprobs *int
	// Greedy says the request samples greedily (temperature 0, or top_k 1, as its
	// dialect's engine reads them): a greedy engine takes the most likely token, so each
	// output token has rank 1 in its logprobs. The tokens drawn are the same either way.
	Greedy bool
}

// FinishReason says why a request ended (OpenAI/vLLM finish_reason values).
type FinishReason string

const (
	FinishStop   FinishReason = "stop"
	FinishLength FinishReason = "length"
)

// Output is what one step produced for one request.
type Output struct {
	RequestID string
	// TokenIDs generated this step (one per step once the prompt is computed). When the
	// request finished on a stop token, it is the last id here, as in vLLM's token_ids.
	TokenIDs []uint32
	Finished bool
	// FinishReason is set when Finished.
	FinishReason FinishReason
	// StopTokenID is the id from Request.StopTokenIDs that ended the request, when
	// HasStopTokenID (vLLM's stop_reason; EOS leaves it unset).
	StopTokenID    uint32
	HasStopTokenID bool
	// PromptTokens is len(Request.Prompt); CachedTokens how many of them were served
	// from the prefix cache when the request was first scheduled (vLLM num_cached_tokens).
	PromptTokens, CachedTokens int
	// OnboardedTokens is how many of CachedTokens were loaded from a lower tier (tier.go)
	// rather than found in the GPU cache, by tier (indexed by kv.Tier).
	OnboardedTokens [kv.NumTiers]int
	// ImportedTokens is how many prompt tokens were taken as computed from a remote
	// prefill when the request was first scheduled (Request.ImportedTokens, less the
	// prefix-cache hits and the last prompt token).
	ImportedTokens int
	// Pinned is set on the finished output of a HoldBlocks request that finished on its
	// length limit: its blocks stay referenced until Release (or Abort). BlockIDs lists
	// them, in block-table order (the prompt's first block first); a pinned request's
	// first len(Prompt)/BlockSize blocks hold its full prompt blocks.
	Pinned   bool
	BlockIDs []int32
	// Logprobs holds one entry per id of TokenIDs when Request.Logprobs was set.
	Logprobs []*messages.TokenLogprob
	// PromptLogprobs holds one entry per prompt token, on the request's first output,
	// when Request.PromptLogprobs was set (the first entry's logprob is NaN).
	PromptLogprobs []*messages.TokenLogprob
}

// StepResult is everything a step did, for the caller to carry out.
type StepResult struct {
	// Start is the time passed to Step; End = Start + Duration, when the outputs and
	// events of the step become visible.
	Start, End time.Time
	Duration   time.Duration
	// Outputs per scheduled request that produced a token (chunked-prefill steps that
	// did not reach the end of the prompt produce none).
	Outputs []Output
	// Events lists the KV events of the step in order: BlockRemoved for each block
	// evicted while allocating, BlockStored for blocks that became full and entered the
	// prefix cache. Empty when prefix caching is off.
	Events []kv.Event
	// PrefillTokens is the number of prompt (or recomputed) tokens computed; DecodeSeqs
	// the number of sequences that computed one decode token.
	PrefillTokens, DecodeSeqs int
	// Preempted lists requests sent back to the waiting queue (their blocks freed; they
	// recompute when scheduled again).
	Preempted []string
	// Idle is true when nothing could be scheduled (Duration is 0).
	Idle bool
	// WakeAt, when not zero on an Idle step, is when the first lower-tier load in flight
	// completes (tier.go): the owner steps again then, or sooner on a new request. A
	// load that completes during a busy step is picked up by the next step.
	WakeAt time.Time
}

// Stats is a snapshot of the engine's load (vLLM metric equivalents in brackets).
type Stats struct {
	Running int // [vllm:num_requests_running]
	Waiting int // [vllm:num_requests_waiting]
	// KVUsage is the fraction of blocks held by requests [vllm:kv_cache_usage_perc].
	KVUsage                                float64
	ActiveBlocks, CachedBlocks, FreeBlocks int
	// PrefixQueries and PrefixHits in tokens [vllm:prefix_cache_queries/_hits].
	PrefixQueries, PrefixHits uint64
	Preemptions               uint64 // [vllm:num_preemptions]
	PromptTokens              uint64 // prompt tokens of requests that started generating [vllm:prompt_tokens]
	GenerationTokens          uint64 // tokens generated [vllm:generation_tokens]
	// PinnedRequests are finished HoldBlocks requests whose blocks are still held;
	// PinnedBlocks the blocks of their block tables (counted in ActiveBlocks too; a block
	// shared by two pinned requests counts twice).
	PinnedRequests, PinnedBlocks int
	// ImportedTokens counts prompt tokens taken from remote prefills (Output.ImportedTokens).
	ImportedTokens uint64
	// LoadedLoras is the number of LoRA adapters loaded (LoadLora); LoraLoads and
	// LoraUnloads count the loads and unloads done. LoraRequests holds, for each adapter
	// that waiting or running requests name, how many of each, by name (nil when none)
	// [vllm:lora_requests_info's waiting_lora_adapters and running_lora_adapters].
	LoadedLoras            int
	LoraLoads, LoraUnloads uint64
	LoraRequests           []LoraRequests
	// Tiers are the lower KV tiers' figures (Config.Tiers; tier.go).
	Tiers TierStats
}

// Engine is the mock engine's scheduler and KV cache. It is not safe for concurrent use;
// one owner calls Add, Abort and Step.
type Engine struct {
	cfg     Config
	vocab   Vocab
	cache   *blockCache
	waiting []*sequence // FCFS; preempted requests go back to the front
	running []*sequence // in admission order; preemption takes from the end
	byID    map[string]*sequence
	// pinned holds the block tables of finished HoldBlocks requests until Release.
	pinned       map[string][]int32
	pinnedBlocks int
	stats        Stats
	// lora is the LoRA adapters the engine holds and their use (lora.go).
	lora loraState
	// linkFree is when the engine's lower-tier link ends the transfers queued on it
	// (tier.go): loads are serialised on it, first admitted first.
	linkFree time.Time
}

type sequence struct {
	req        Request
	tokens     []uint32 // prompt then output
	computed   int      // tokens whose KV is computed
	blocks     []int32  // block table
	hashes     []uint64 // sequence hashes of the leading full blocks of tokens
	registered int      // leading blocks already offered to the prefix cache
	hashSeed   uint64
	seed       uint64 // the generation seed (Request.Seed or Config.Seed)
	state      uint64 // generation state: seed folded with every token
	output     int
	cached     int
	imported   int
	onboarded  [kv.NumTiers]int // tokens onboarded at first admission, by tier
	admitted   bool
	finished   bool
	// loading: admitted with its blocks allocated, waiting in the waiting queue until
	// its lower-tier load ends at loadedAt (tier.go); computed counts the loaded tokens.
	loading  bool
	loadedAt time.Time
}

// New returns an engine with cfg (validated) generating from vocab (at least one
// ordinary token).
func New(cfg Config, vocab Vocab) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(vocab.Ordinary) == 0 {
		return nil, errors.New("mocker: vocabulary has no ordinary tokens")
	}
	e := &Engine{
		cfg:    cfg,
		vocab:  vocab,
		cache:  newBlockCache(cfg.NumGPUBlocks, cfg.BlockSize, cfg.EnablePrefixCaching),
		byID:   make(map[string]*sequence),
		pinned: make(map[string][]int32),
	}
	e.cache.offload = cfg.Tiers != nil
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a request. Errors: empty or duplicate id (ErrDuplicateID; a pinned request
// keeps its id until released), empty prompt, MaxTokens < 1, MinTokens outside [0,
// MaxTokens], ImportedTokens outside [0, len(Prompt)], Logprobs or PromptLogprobs outside
// [0, MaxLogprobs], or prompt plus MaxTokens longer than MaxModelLen.
func (e *Engine) Add(r Request) error {
	_, pinned := e.pinned[r.ID]
	switch {
	case r.ID == "":
		return errors.New("mocker: request without id")
	case e.byID[r.ID] != nil || pinned:
		return fmt.Errorf("%w %q", ErrDuplicateID, r.ID)
	case len(r.Prompt) == 0:
		return fmt.Errorf("mocker: request %q has an empty prompt", r.ID)
	case r.MaxTokens < 1:
		return fmt.Errorf("mocker: request %q: max_tokens %d must be at least 1", r.ID, r.MaxTokens)
	case r.MinTokens < 0 || r.MinTokens > r.MaxTokens:
		return fmt.Errorf("mocker: request %q: min_tokens %d must be between 0 and max_tokens %d", r.ID, r.MinTokens, r.MaxTokens)
	case r.ImportedTokens < 0 || r.ImportedTokens > len(r.Prompt):
		return fmt.Errorf("mocker: request %q: %d imported tokens must be between 0 and the prompt's %d", r.ID, r.ImportedTokens, len(r.Prompt))
	case r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > MaxLogprobs):
		return fmt.Errorf("mocker: request %q: logprobs %d must be between 0 and %d", r.ID, *r.Logprobs, MaxLogprobs)
	case r.PromptLogprobs != nil && (*r.PromptLogprobs < 0 || *r.PromptLogprobs > MaxLogprobs):
		return fmt.Errorf("mocker: request %q: prompt_logprobs %d must be between 0 and %d", r.ID, *r.PromptLogprobs, MaxLogprobs)
	case r.MaxTokens > e.cfg.MaxModelLen-len(r.Prompt): // no overflow for a huge max_tokens
		return fmt.Errorf("mocker: request %q: %d prompt tokens plus max_tokens %d exceed the context length %d",
			r.ID, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen)
	}
	seed := e.cfg.Seed
	if r.HasSeed {
		seed = r.Seed
	}
	s := &sequence{
		req:      r,
		tokens:   append(make([]uint32, 0, len(r.Prompt)+min(r.MaxTokens, 256)), r.Prompt...),
		hashSeed: kv.LoraSeed(r.LoraName),
		seed:     seed,
		state:    foldTokens(seedState(seed^loraSeedMix(r.LoraName)), r.Prompt),
	}
	e.byID[r.ID] = s
	e.lora.added(r.LoraName)
	at := len(e.waiting)
	for at > 0 && e.waiting[at-1].req.Priority > r.Priority {
		at--
	}
	e.waiting = slices.Insert(e.waiting, at, s)
	return nil
}

// Abort removes a request, waiting, running or pinned, and frees its blocks (full blocks
// stay in the prefix cache). It reports whether the request was in the engine.
func (e *Engine) Abort(id string) bool {
	if e.Release(id) {
		return true
	}
	s := e.byID[id]
	if s == nil {
		return false
	}
	if i := slices.Index(e.waiting, s); i >= 0 {
		e.waiting = slices.Delete(e.waiting, i, i+1)
	}
	if s.loading { // its transfer still occupies the link until it would have ended
		s.loading = false
		e.stats.Tiers.LoadingRequests--
	}
	if i := slices.Index(e.running, s); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
	e.freeBlocks(s)
	delete(e.byID, id)
	e.lora.left(s.req.LoraName)
	return true
}

// Release frees the blocks of a pinned request (Output.Pinned), last block first; full
// blocks stay in the prefix cache. It reports whether id was pinned: releasing a request
// that is not (any more) is harmless.
func (e *Engine) Release(id string) bool {
	blocks, ok := e.pinned[id]
	if !ok {
		return false
	}
	for k := len(blocks) - 1; k >= 0; k-- {
		e.cache.release(blocks[k])
	}
	e.pinnedBlocks -= len(blocks)
	delete(e.pinned, id)
	return true
}

// HasWork reports whether any request is waiting or running (pinned requests are not
// work: they wait for Release).
func (e *Engine) HasWork() bool { return len(e.waiting)+len(e.running) > 0 }

// Stats returns the current load and counters.
func (e *Engine) Stats() Stats {
	st := e.stats
	st.Running, st.Waiting = len(e.running), len(e.waiting)
	st.ActiveBlocks = e.cache.active
	st.CachedBlocks = e.cache.lruLen
	st.FreeBlocks = len(e.cache.free)
	st.KVUsage = float64(e.cache.active) / float64(e.cfg.NumGPUBlocks)
	st.PinnedRequests, st.PinnedBlocks = len(e.pinned), e.pinnedBlocks
	st.LoadedLoras = len(e.lora.adapters)
	st.LoraRequests = e.loraRequests()
	return st
}

type scheduled struct {
	s *sequence
	n int // tokens computed this step
}

// Step schedules and runs one engine step starting at now: running requests first (a
// decode token each, or the next chunk of their prefill), preempting the most recently
// admitted request while blocks are short; then, unless something was preempted,
// waiting requests in order while the token budget, MaxNumSeqs and the blocks allow
// (prefix-cache hits are reused, not recomputed). A waiting request whose prefix a lower
// tier holds is admitted without computing anything: its blocks are allocated, its load
// is queued on the engine's link, and it stays in the waiting queue, skipped, until the
// load ends; a step starting then or later schedules it like a request with that prefix
// cached (tier.go). Every request whose tokens are all computed generates one token. The
// returned duration follows the timing model; a step with only loads in flight is Idle
// with WakeAt set.
func (e *Engine) Step(now time.Time) StepResult {
	res := StepResult{Start: now, End: now}
	budget := e.cfg.MaxNumBatchedTokens
	bs := e.cfg.BlockSize
	var batch []scheduled
	defer e.offload() // the blocks evicted by this step's allocations

	for i := 0; i < len(e.running) && budget > 0; {
		s := e.running[i]
		n := min(len(s.tokens)-s.computed, budget)
		need := ceilDiv(s.computed+n, bs) - len(s.blocks)
		self := false
		for need > e.cache.available() && !self {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			res.Preempted = append(res.Preempted, victim.req.ID)
			self = victim == s
		}
		if self {
			break
		}
		e.grow(s, need)
		batch = append(batch, scheduled{s, n})
		budget -= n
		i++
	}

	for i := 0; len(res.Preempted) == 0 && i < len(e.waiting) && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs; {
		s := e.waiting[i]
		if s.loading {
			if now.Before(s.loadedAt) {
				i++ // still loading: later requests may go first (vLLM's WAITING_FOR_REMOTE_KVS)
				continue
			}
			n, ok := e.loadedChunk(s, budget)
			if !ok {
				break
			}
			s.loading = false
			e.waiting = slices.Delete(e.waiting, i, i+1)
			e.running = append(e.running, s)
			batch = append(batch, scheduled{s, n})
			budget -= n
			continue
		}
		hits := e.prefixHits(s)
		hitTokens := hits * bs
		// Blocks after the GPU hit that a lower tier holds are onboarded (tier.go).
		lower := e.lowerHits(s, hits)
		// A remote prefill's tokens count as computed on first admission only: once
		// preempted, the request recomputes them.
		start, imported := hitTokens+len(lower)*bs, 0
		if !s.admitted {
			if k := min(s.req.ImportedTokens, len(s.tokens)-1); k > start {
				start, imported, lower = k, k-hitTokens, nil
			}
		}
		n := len(s.tokens) - start
		if !e.cfg.EnableChunkedPrefill && n > budget {
			break
		}
		n = min(n, budget)
		need := ceilDiv(start+n, bs) - hits
		inactiveHits := 0
		for k := 0; k < hits; k++ {
			id, _ := e.cache.lookup(s.hashes[k])
			if e.cache.blocks[id].ref == 0 {
				inactiveHits++
			}
		}
		if need > e.cache.available()-inactiveHits {
			break
		}
		var loadTime time.Duration
		if len(lower) > 0 {
			// Fewer blocks read than matched: the rest is computed, within the budget,
			// in no more blocks than checked (start+n only shrinks).
			var got int
			got, loadTime = e.onboard(s, hits, lower)
			lower = lower[:got]
			start = hitTokens + got*bs
			n = min(len(s.tokens)-start, budget)
			need = ceilDiv(start+n, bs) - hits
		}
		for k := 0; k < hits; k++ {
			id, _ := e.cache.lookup(s.hashes[k])
			e.cache.acquire(id)
			s.blocks = append(s.blocks, id)
		}
		s.computed, s.registered = start, hits
		e.grow(s, need)
		if e.cfg.EnablePrefixCaching {
			e.stats.PrefixQueries += uint64(len(s.tokens))
			e.stats.PrefixHits += uint64(hitTokens)
		}
		if !s.admitted {
			s.admitted, s.cached, s.imported = true, hitTokens+len(lower)*bs, imported
			for _, t := range lower {
				s.onboarded[t] += bs
			}
			e.stats.ImportedTokens += uint64(imported)
		}
		if loadTime > 0 {
			// The blocks are held (the first chunk's too); the request waits in place.
			s.loading, s.loadedAt = true, e.queueLoad(now, loadTime)
			i++
			continue
		}
		e.waiting = slices.Delete(e.waiting, i, i+1)
		e.running = append(e.running, s)
		batch = append(batch, scheduled{s, n})
		budget -= n
	}

	if len(batch) == 0 {
		res.Idle = true
		res.WakeAt = e.nextLoaded(now)
		res.Events = e.cache.takeEvents()
		return res
	}

	usage := float64(e.cache.active) / float64(e.cfg.NumGPUBlocks)
	anyFinished := false
	decodeContext := 0 // tokens of the decoding sequences, for a profile's timing
	for _, sc := range batch {
		s := sc.s
		if s.output > 0 && sc.n == 1 && s.computed == len(s.tokens)-1 {
			res.DecodeSeqs++
			decodeContext += len(s.tokens)
		} else {
			res.PrefillTokens += sc.n
		}
		s.computed += sc.n
		e.commitFullBlocks(s)
		if s.computed < len(s.tokens) {
			continue // chunked prefill continues next step
		}
		out := e.generate(s)
		if out.Finished {
			anyFinished = true
			s.finished = true
			if s.req.HoldBlocks && out.FinishReason == FinishLength {
				out.Pinned, out.BlockIDs = true, slices.Clone(s.blocks)
				e.pinned[s.req.ID] = s.blocks // the references now belong to the pin
				e.pinnedBlocks += len(s.blocks)
				s.blocks = nil
			} else {
				e.freeBlocks(s)
			}
			delete(e.byID, s.req.ID)
			e.lora.left(s.req.LoraName)
		}
		res.Outputs = append(res.Outputs, out)
	}
	if anyFinished {
		e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.finished })
	}
	res.Events = e.cache.takeEvents()
	meanContext := 0.0
	if res.DecodeSeqs > 0 {
		meanContext = float64(decodeContext) / float64(res.DecodeSeqs)
	}
	res.Duration = e.cfg.StepDuration(res.PrefillTokens, res.DecodeSeqs, usage, meanContext)
	res.End = now.Add(res.Duration)
	return res
}

// grow appends need newly allocated blocks to s (the caller checked availability).
func (e *Engine) grow(s *sequence, need int) {
	for ; need > 0; need-- {
		id, ok := e.cache.allocate()
		if !ok {
			panic("mocker: block allocation failed after an availability check")
		}
		s.blocks = append(s.blocks, id)
	}
}

// prefixHits returns how many leading full blocks of s are in the prefix cache, at most
// (len(tokens)-1)/BlockSize so that at least one token is computed (as vLLM).
func (e *Engine) prefixHits(s *sequence) int {
	if !e.cfg.EnablePrefixCaching {
		return 0
	}
	limit := (len(s.tokens) - 1) / e.cfg.BlockSize
	e.ensureHashes(s, limit)
	hits := 0
	for hits < limit {
		if _, ok := e.cache.lookup(s.hashes[hits]); !ok {
			break
		}
		hits++
	}
	return hits
}

// ensureHashes extends s.hashes to the first n full blocks of s.tokens.
func (e *Engine) ensureHashes(s *sequence, n int) {
	bs := e.cfg.BlockSize
	for k := len(s.hashes); k < n; k++ {
		local := kv.LocalBlockHash(s.tokens[k*bs:(k+1)*bs], s.hashSeed)
		if k == 0 {
			s.hashes = append(s.hashes, kv.FirstBlockHash(local, s.req.CacheSalt))
		} else {
			s.hashes = append(s.hashes, kv.ChainHash(s.hashes[k-1], local))
		}
	}
}

// commitFullBlocks offers the blocks of s that became full to the prefix cache and
// records one BlockStored event per run of newly registered blocks (vLLM emits one per
// request and step).
func (e *Engine) commitFullBlocks(s *sequence) {
	if !e.cfg.EnablePrefixCaching {
		return
	}
	bs := e.cfg.BlockSize
	full := s.computed / bs
	if full <= s.registered {
		return
	}
	e.ensureHashes(s, full)
	run := -1 // index in the cache's events of the BlockStored being extended
	for k := s.registered; k < full; k++ {
		eh := kv.ChainHash(s.hashes[k], engineHashSalt)
		if !e.cache.register(s.blocks[k], s.hashes[k], eh) {
			run = -1 // a duplicate breaks the run: the next stored block names its parent
			continue
		}
		if run < 0 {
			ev := kv.Event{Kind: kv.BlockStored, BlockSize: bs, LoraName: s.req.LoraName, Medium: mediumGPU}
			if k > 0 {
				ev.HasParent, ev.ParentHash = true, kv.ChainHash(s.hashes[k-1], engineHashSalt)
			} else {
				ev.CacheSalt = s.req.CacheSalt
			}
			e.cache.events = append(e.cache.events, ev)
			run = len(e.cache.events) - 1
		}
		ev := &e.cache.events[run]
		ev.EngineHashes = append(ev.EngineHashes, eh)
		ev.TokenIDs = append(ev.TokenIDs, s.tokens[k*bs:(k+1)*bs]...)
	}
	s.registered = full
}

// generate draws the next token of s and applies the stop rules in vLLM's order: EOS
// (unless ignore_eos), then stop_token_ids, then max_tokens and the context length.
func (e *Engine) generate(s *sequence) Output {
	tok := e.nextToken(s)
	var lp *messages.TokenLogprob
	if s.req.Logprobs != nil {
		maxRank := 2
		if s.req.Greedy {
			maxRank = 1
		}
		lp = e.tokenLogprob(s.state, tok, *s.req.Logprobs, maxRank)
	}
	first := s.output == 0
	if first {
		e.stats.PromptTokens += uint64(len(s.req.Prompt))
	}
	s.tokens = append(s.tokens, tok)
	s.state = foldToken(s.state, tok)
	s.output++
	e.stats.GenerationTokens++
	out := Output{RequestID: s.req.ID, TokenIDs: []uint32{tok}, PromptTokens: len(s.req.Prompt), CachedTokens: s.cached,
		ImportedTokens: s.imported, OnboardedTokens: s.onboarded}
	if lp != nil {
		out.Logprobs = []*messages.TokenLogprob{lp}
	}
	if first && s.req.PromptLogprobs != nil {
		out.PromptLogprobs = e.promptLogprobs(s.seed, s.req.Prompt, *s.req.PromptLogprobs)
	}
	switch {
	case !s.req.IgnoreEOS && slices.Contains(e.vocab.EOS, tok):
		out.Finished, out.FinishReason = true, FinishStop
	case slices.Contains(s.req.StopTokenIDs, tok):
		out.Finished, out.FinishReason = true, FinishStop
		out.StopTokenID, out.HasStopTokenID = tok, true
	case s.output >= s.req.MaxTokens || len(s.tokens) >= e.cfg.MaxModelLen:
		out.Finished, out.FinishReason = true, FinishLength
	}
	return out
}

// nextToken is a function of the generation state (seed and every token so far), the
// output count (for min_tokens and the script) and the request's stop settings only.
func (e *Engine) nextToken(s *sequence) uint32 {
	mayStop := s.output >= s.req.MinTokens
	if script := s.req.Script; script != nil {
		switch {
		case s.output < len(script):
			if t := script[s.output]; mayStop || !e.isStop(s, t) {
				return t
			}
		case mayStop && !s.req.IgnoreEOS && len(e.vocab.EOS) > 0:
			return e.vocab.EOS[0]
		}
		// A word: past the script with ignore_eos, before min_tokens or without an
		// EOS token, or in place of a script token min_tokens masks. The draw below
		// picks EOS in none of these cases.
	}
	if mayStop && !s.req.IgnoreEOS && len(e.vocab.EOS) > 0 && e.eosAllowed(s) &&
		unitFloat(mix64(s.state^0x5bd1e9955bd1e995)) < 1/float64(e.cfg.MeanOutputTokens) {
		return e.vocab.EOS[0]
	}
	if len(s.req.AllowedTokenIDs) > 0 || len(s.req.LogitBias) > 0 {
		return e.constrainedWord(s, mayStop)
	}
	ord := e.vocab.Ordinary
	idx := int(s.state % uint64(len(ord)))
	tok := ord[idx]
	if mayStop || !e.isStop(s, tok) {
		return tok
	}
	for j := 1; j < len(ord); j++ { // min_tokens masks stop ids: take the next word
		if t := ord[(idx+j)%len(ord)]; !e.isStop(s, t) {
			return t
		}
	}
	return tok
}

func (e *Engine) isStop(s *sequence, t uint32) bool {
	return (!s.req.IgnoreEOS && slices.Contains(e.vocab.EOS, t)) || slices.Contains(s.req.StopTokenIDs, t)
}

// preempt frees the blocks of a running request and puts it at the front of the waiting
// queue; its output so far is kept and its KV recomputed (vLLM's recompute preemption).
func (e *Engine) preempt(s *sequence) {
	e.freeBlocks(s)
	s.computed, s.registered = 0, 0
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.stats.Preemptions++
}

// freeBlocks releases the blocks of s last first, so that its earlier (shared prefix)
// blocks are the most recently released and the last to be evicted.
func (e *Engine) freeBlocks(s *sequence) {
	for k := len(s.blocks) - 1; k >= 0; k-- {
		e.cache.release(s.blocks[k])
	}
	s.blocks = s.blocks[:0]
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
