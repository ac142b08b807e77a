package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// Disaggregated serving (docs/reference.md §6). Every mock engine serves both legs of a
// disaggregated request, whatever its Role, as vLLM's NIXL connector with kv_role
// kv_both does: a request's own parameters say which leg it is (vLLM's
// kv_transfer_params, TensorRT-LLM's disaggregated_params). Role says what the worker
// registers as; only the SGLang dialect acts on it, because SGLang's requests do not
// name their leg (both legs carry the same bootstrap fields and --disaggregation-mode
// decides).
//
// A prefill leg keeps its blocks pinned after it finishes (mocker.Request.HoldBlocks) and
// registers its full prompt blocks with the engine's KV transfer port
// (engines/mocker/kvtransfer). A decode leg reads them from the prefill engine's port
// before it enters the engine (so its TTFT includes the transfer), then runs with the
// prompt's KV imported (mocker.Request.ImportedTokens). The prefill engine releases the
// pinned blocks once they were read, when the reader leaves early, on an explicit
// release (kvtransfer.Release, which engines.KVReleaser uses), or after
// KVTransferOptions.Timeout.
//
// A read that fails — the prefill engine refused the connection, cut it, stopped
// answering for KVTransferOptions.ReadTimeout, or no longer holds the blocks — is a KV
// load failure, handled by KVTransferOptions.LoadFailurePolicy: "fail" answers the
// dialect's KV transfer error (vLLM: 503 KVTransferError; SGLang: 500 "Decode transfer
// failed ... KVTransferError(...)"; TensorRT-LLM: 500 KVTransferError naming
// DISAGG_TRANS_ERROR), which Turbine's adapters report as engines.ErrKVTransfer so that
// the request's prefill is retried elsewhere; "recompute" (vLLM's kv_load_failure_policy,
// vLLM dialect only) makes the decode leg compute the whole prompt itself, counted in
// MetricKVRecomputed. Only malformed transfer parameters are refused with 400.
//
// Simplification: a decode leg reads every full prompt block the prefill leg kept, even
// those its own prefix cache already holds (vLLM reads only the blocks past its local
// hit); the engine then counts those as prefix-cache hits (cached_tokens) and the rest
// as imported.

// Role is the part an engine plays in disaggregated serving.
type Role string

// Roles of disaggregated serving.
const (
	RoleAggregated Role = "aggregated"
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
)

// Roles lists the roles, the default first.
var Roles = []Role{RoleAggregated, RolePrefill, RoleDecode}

// ParseRole checks a role name ("" is RoleAggregated). Errors name the accepted ones.
func ParseRole(s string) (Role, error) {
	if s == "" {
		return RoleAggregated, nil
	}
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("server: role %q: want aggregated, prefill or decode", s)
}

// Defaults of the KV transfer.
const (
	// DefaultKVTransferBandwidth is the reference mocker's transfer bandwidth (docs/reference.md
	// §7: 64 GB/s), in bytes per second.
	DefaultKVTransferBandwidth = 64e9
	// DefaultKVBytesPerToken is the KV cache size of one token when no model folder says
	// otherwise: Llama-3.1-8B in bfloat16, 2 (K and V) × 32 layers × 8 KV heads × 128 ×
	// 2 bytes = 131072 bytes.
	DefaultKVBytesPerToken = 131072
	// DefaultKVTransferTimeout is how long pinned blocks wait for their reader: vLLM's
	// VLLM_NIXL_ABORT_REQUEST_TIMEOUT.
	DefaultKVTransferTimeout = 480 * time.Second
	// DefaultKVTransferHost is the address the transfer port listens on and advertises.
	DefaultKVTransferHost = "127.0.0.1"
	// DefaultKVTransferConnectTimeout and DefaultKVTransferReadTimeout bound a decode
	// leg's read of the prefill engine's blocks (kvtransfer.Client).
	DefaultKVTransferConnectTimeout = kvtransfer.DefaultConnectTimeout
	DefaultKVTransferReadTimeout    = kvtransfer.DefaultProgressTimeout
)

// KV load failure policies (vLLM's kv_transfer_config kv_load_failure_policy).
const (
	// LoadFailureFail answers a decode leg whose read failed with the dialect's KV
	// transfer error (vLLM's default in recent releases).
	LoadFailureFail = "fail"
	// LoadFailureRecompute makes such a decode leg compute the whole prompt itself (vLLM
	// dialect only: SGLang and TensorRT-LLM have no such fallback).
	LoadFailureRecompute = "recompute"
)

// LoadFailurePolicies lists the policies, the default first.
var LoadFailurePolicies = []string{LoadFailureFail, LoadFailureRecompute}

// KVTransferOptions configure the engine's KV transfer port. Zero values take the
// defaults above.
type KVTransferOptions struct {
	// Host is the address the port listens on and that prefill legs advertise
	// (remote_host); a wildcard address is advertised as DefaultKVTransferHost.
	Host string
	// Port is the TCP port (0 picks a free one; KVTransferAddr names it).
	Port int
	// Bandwidth in bytes per second at which reads of this engine's blocks are paced
	// (turbine mocker's flag takes kvtransfer.MinBandwidth to kvtransfer.MaxBandwidth);
	// the engine's speed-up ratio multiplies it, as it divides every modelled duration,
	// and the product must be at least 1 byte/s. It is a ceiling: the bytes really
	// cross the connection, and loopback TCP moves a few GB/s (kvtransfer's
	// BenchmarkRead), well below the default 64 GB/s.
	Bandwidth float64
	// BytesPerToken is the KV cache size of one token in bytes (the model's
	// kv_bytes_per_token, package model), 1 to kvtransfer.MaxBytesPerToken.
	BytesPerToken int64
	// Timeout releases pinned blocks nobody read.
	Timeout time.Duration
	// EngineID is the id prefill legs advertise (remote_engine_id); random when empty.
	EngineID string
	// ConnectTimeout and ReadTimeout bound this engine's reads as a decode leg:
	// connecting to the prefill engine's port, and each wait for its answer, keepalive
	// or data once connected (DefaultKVTransferConnectTimeout,
	// DefaultKVTransferReadTimeout when 0). A read past either fails as a KV load
	// failure.
	ConnectTimeout, ReadTimeout time.Duration
	// LoadFailurePolicy is LoadFailureFail (default) or LoadFailureRecompute.
	LoadFailurePolicy string
}

func (o *KVTransferOptions) resolve() error {
	if o.Host == "" {
		o.Host = DefaultKVTransferHost
	}
	if o.Bandwidth == 0 {
		o.Bandwidth = DefaultKVTransferBandwidth
	}
	if o.BytesPerToken == 0 {
		o.BytesPerToken = DefaultKVBytesPerToken
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultKVTransferTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultKVTransferConnectTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultKVTransferReadTimeout
	}
	if o.LoadFailurePolicy == "" {
		o.LoadFailurePolicy = LoadFailureFail
	}
	if o.EngineID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		h := hex.EncodeToString(b[:])
		o.EngineID = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("server: --kv-transfer-port %d out of range 0-65535", o.Port)
	case !(o.Bandwidth > 0) || math.IsInf(o.Bandwidth, 0):
		// The flags bound it further (kvtransfer.MinBandwidth, MaxBandwidth); times the
		// speed-up ratio it must stay at least 1 byte/s (kvtransfer.NewServer).
		return fmt.Errorf("server: --kv-transfer-bandwidth %v bytes/s must be positive and finite", o.Bandwidth)
	case o.BytesPerToken < 1 || o.BytesPerToken > kvtransfer.MaxBytesPerToken:
		return fmt.Errorf("server: --kv-bytes-per-token %d out of range 1-%d (16 MiB)", o.BytesPerToken, kvtransfer.MaxBytesPerToken)
	case o.Timeout < 0:
		return fmt.Errorf("server: --kv-transfer-timeout %v must be positive", o.Timeout)
	case o.ConnectTimeout < 0:
		return fmt.Errorf("server: --kv-transfer-connect-timeout %v must be positive", o.ConnectTimeout)
	case o.ReadTimeout < 0:
		return fmt.Errorf("server: --kv-transfer-read-timeout %v must be positive", o.ReadTimeout)
	case o.LoadFailurePolicy != LoadFailureFail && o.LoadFailurePolicy != LoadFailureRecompute:
		return fmt.Errorf("server: --kv-load-failure-policy %q: want fail or recompute", o.LoadFailurePolicy)
	}
	return nil
}

// transfer is the engine's KV transfer port and its metrics.
type transfer struct {
	srv       *kvtransfer.Server
	l         net.Listener
	host      string // advertised
	port      int
	engineID  string
	served    chan error
	blockSize int
	bpt       int64

	client        kvtransfer.Client
	recompute     bool             // LoadFailureRecompute
	reads, failed *metrics.Counter // reads by this engine as a decode leg
	recomputed    *metrics.Counter // failed reads whose decode leg computed the prompt itself
	bytes         *metrics.Counter
	seconds       *metrics.FloatCounter
	sent          *metrics.Counter // synced with the server's count when a read ends
	released      map[kvtransfer.Reason]*metrics.Counter
	nixl          *nixlMetrics // vLLM dialect only
}

// Metric names of the mock engine's disaggregated serving (every dialect).
const (
	MetricRoleInfo       = "turbine_mocker_role_info"
	MetricPinnedBlocks   = "turbine_mocker_kv_pinned_blocks"
	MetricPinnedRequests = "turbine_mocker_kv_pinned_requests"
	// MetricWaitingReads: reads of this engine's blocks waiting for them to be pinned
	// (SGLang rooms whose decode leg came before the prefill leg finished).
	MetricWaitingReads = "turbine_mocker_kv_waiting_reads"
	// MetricActiveReads: reads of this engine's blocks under way (data being sent).
	MetricActiveReads       = "turbine_mocker_kv_active_reads"
	MetricReleased          = "turbine_mocker_kv_released_total"
	MetricTransfers         = "turbine_mocker_kv_transfers_total"
	MetricTransferBytes     = "turbine_mocker_kv_transfer_bytes_total"
	MetricTransferSeconds   = "turbine_mocker_kv_transfer_seconds_total"
	MetricTransferSentBytes = "turbine_mocker_kv_transfer_sent_bytes_total"
	// MetricKVRecomputed: decode legs whose KV read failed and that computed the whole
	// prompt themselves (KVTransferOptions.LoadFailurePolicy "recompute").
	MetricKVRecomputed = "turbine_mocker_kv_recomputed_total"
)

// vLLM's NIXL connector metrics (vllm/distributed/kv_transfer/kv_connector/v1/nixl),
// served by the vLLM dialect: a decode engine records its reads.
const (
	MetricNIXLXferTime    = "vllm:nixl_xfer_time_seconds"
	MetricNIXLBytes       = "vllm:nixl_bytes_transferred"
	MetricNIXLFailed      = "vllm:nixl_num_failed_transfers_total"
	MetricNIXLExpiredReqs = "vllm:nixl_num_kv_expired_reqs_total"
)

// nixlTimeBuckets are the upper bounds, in seconds, of MetricNIXLXferTime.
var nixlTimeBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// nixlMetrics are vLLM's NIXL connector metrics of one engine: its reads as a decode
// engine, and its pins that timed out as a prefill engine.
type nixlMetrics struct {
	time, bytes     *metrics.PrometheusHistogram
	failed, expired *metrics.Counter
}

// newNIXLMetrics registers the NIXL metrics of the engine serving model in set.
func newNIXLMetrics(set *metrics.Set, model string) *nixlMetrics {
	labels := fmt.Sprintf(`model_name=%s,engine="0"`, strconv.Quote(model))
	var byteBuckets []float64
	for b := 2048.0; b <= 16<<30; b *= 4 {
		byteBuckets = append(byteBuckets, b)
	}
	return &nixlMetrics{
		time:    set.NewPrometheusHistogramExt(MetricNIXLXferTime+"{"+labels+"}", nixlTimeBuckets),
		bytes:   set.NewPrometheusHistogramExt(MetricNIXLBytes+"{"+labels+"}", byteBuckets),
		failed:  set.NewCounter(MetricNIXLFailed + "{" + labels + "}"),
		expired: set.NewCounter(MetricNIXLExpiredReqs + "{" + labels + "}"),
	}
}

// startTransfer binds the transfer port and registers the metrics.
func (s *Server) startTransfer() error {
	o := s.opts.KVTransfer
	cfg := s.opts.Engine
	l, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("server: --kv-transfer-port %d on %s: %w", o.Port, o.Host, err)
	}
	host := o.Host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = DefaultKVTransferHost
	}
	t := &transfer{l: l, host: host, port: l.Addr().(*net.TCPAddr).Port, engineID: o.EngineID,
		served: make(chan error, 1), blockSize: cfg.BlockSize, bpt: o.BytesPerToken,
		released:  map[kvtransfer.Reason]*metrics.Counter{},
		client:    kvtransfer.Client{ConnectTimeout: o.ConnectTimeout, ProgressTimeout: o.ReadTimeout},
		recompute: o.LoadFailurePolicy == LoadFailureRecompute}
	t.srv, err = kvtransfer.NewServer(kvtransfer.Config{EngineID: o.EngineID, BlockSize: cfg.BlockSize,
		BytesPerToken: o.BytesPerToken, Bandwidth: o.Bandwidth * cfg.SpeedupRatio, Timeout: o.Timeout,
		Release: s.onRelease})
	if err != nil {
		_ = l.Close()
		return err
	}
	set := s.metrics
	statsNow := func() *mocker.Stats { return s.stats.Load() }
	set.NewGauge(fmt.Sprintf(`%s{role=%q}`, MetricRoleInfo, s.opts.Role), func() float64 { return 1 })
	set.NewGauge(MetricPinnedBlocks, func() float64 { return float64(statsNow().PinnedBlocks) })
	set.NewGauge(MetricPinnedRequests, func() float64 { return float64(statsNow().PinnedRequests) })
	set.NewGauge(MetricWaitingReads, func() float64 { return float64(t.srv.Waiting()) })
	set.NewGauge(MetricActiveReads, func() float64 { return float64(t.srv.Reading()) })
	for _, r := range kvtransfer.Reasons {
		t.released[r] = set.NewCounter(fmt.Sprintf(`%s{reason=%q}`, MetricReleased, r))
	}
	t.reads = set.NewCounter(MetricTransfers + `{result="ok"}`)
	t.failed = set.NewCounter(MetricTransfers + `{result="failed"}`)
	t.bytes = set.NewCounter(MetricTransferBytes)
	t.seconds = set.NewFloatCounter(MetricTransferSeconds)
	t.sent = set.NewCounter(MetricTransferSentBytes)
	t.recomputed = set.NewCounter(MetricKVRecomputed)
	s.xfer = t
	return nil
}

// KVTransferAddr is the host:port of the engine's KV transfer port (what prefill legs
// advertise as remote_host and remote_port, and SGLang's bootstrap address).
func (s *Server) KVTransferAddr() string {
	return net.JoinHostPort(s.xfer.host, strconv.Itoa(s.xfer.port))
}

// kvTransferHostPort is the KV transfer listener's advertised host and port.
func (s *Server) kvTransferHostPort() (string, int) { return s.xfer.host, s.xfer.port }

// KVTransferEngineID is the engine id prefill legs advertise (remote_engine_id).
func (s *Server) KVTransferEngineID() string { return s.xfer.engineID }

// TransferStats counts the engine's KV transfers.
type TransferStats struct {
	// Reads this engine made as a decode leg: completed and failed, their bytes and
	// their total duration in seconds (dial to last byte).
	Reads, FailedReads uint64
	Bytes              uint64
	Seconds            float64
	// Recomputed: failed reads whose decode leg computed the prompt itself.
	Recomputed uint64
	// SentBytes this engine sent as a prefill engine; Released counts its pins' ends by
	// reason.
	SentBytes int64
	Released  map[kvtransfer.Reason]uint64
	// Pins waiting for their reader (or being read).
	Pins int
}

// TransferStats returns the engine's transfer counters.
func (s *Server) TransferStats() TransferStats {
	t := s.xfer
	st := TransferStats{Reads: t.reads.Get(), FailedReads: t.failed.Get(), Bytes: t.bytes.Get(), Seconds: t.seconds.Get(),
		Recomputed: t.recomputed.Get(), SentBytes: t.srv.SentBytes(), Released: map[kvtransfer.Reason]uint64{},
		Pins: t.srv.Pins()}
	for r, c := range t.released {
		st.Released[r] = c.Get()
	}
	return st
}

// onRelease frees a pin's blocks in the engine (kvtransfer.Config.Release).
func (s *Server) onRelease(key, requestID string, reason kvtransfer.Reason) {
	s.xfer.sent.Set(uint64(s.xfer.srv.SentBytes())) // every read ends with a release
	s.xfer.released[reason].Inc()
	if reason == kvtransfer.ReasonTimeout && s.xfer.nixl != nil {
		s.xfer.nixl.expired.Inc()
	}
	s.log.Debug().Str("request_id", requestID).Str("key", key).Str("reason", string(reason)).Msg("pinned KV blocks released")
	s.applyWait(context.Background(), command{release: requestID, aborted: make(chan struct{})})
}

// ReleaseKV releases the blocks pinned under key (a prefill leg's request id as
// advertised, or an SGLang room's kvtransfer.RoomKey) in this engine; it reports
// whether they were pinned. It is what a release message on the transfer port does.
func (s *Server) ReleaseKV(key string) bool { return s.xfer.srv.Unpin(key) }

// prefillDone handles the finished output o of a prefill leg: its full prompt blocks are
// pinned under key for a decode leg to read. Blocks the reader will not read are not
// kept: with no full prompt block, vLLM's connector frees them at once (pinEmpty false);
// an SGLang room is pinned anyway (pinEmpty true), since its reader is waiting. A leg
// whose client has gone (ctx ended) releases its blocks (kvtransfer.ReasonClientGone).
// ok is false when nothing was pinned (o not pinned: the leg finished on a stop token;
// or the client left).
func (s *Server) prefillDone(ctx context.Context, key string, o mocker.Output, promptLen int, pinEmpty bool) (blocks []int64, ok bool) {
	if !o.Pinned {
		return nil, false
	}
	s.hook(ctx, hookPrefillFinished)
	full := min(promptLen/s.opts.Engine.BlockSize, len(o.BlockIDs))
	blocks = make([]int64, full)
	for i := range blocks {
		blocks[i] = int64(o.BlockIDs[i])
	}
	switch {
	case full == 0 && !pinEmpty:
		s.applyWait(context.Background(), command{release: o.RequestID, aborted: make(chan struct{})})
		return blocks, ctx.Err() == nil
	case ctx.Err() != nil:
		s.onRelease(key, o.RequestID, kvtransfer.ReasonClientGone)
		return blocks, false
	}
	s.xfer.srv.Pin(key, o.RequestID, o.BlockIDs[:full])
	s.hook(ctx, hookPrefillPinned)
	return blocks, true
}

// Points of a prefill leg at which a test hook (Server.testHook) runs.
const (
	hookPrefillFinished = "finished" // the engine kept the blocks; not pinned yet
	hookPrefillPinned   = "pinned"   // pinned; the answer naming them is not written yet
)

// hook runs the test hook, if any, at point of a request whose context is ctx.
func (s *Server) hook(ctx context.Context, point string) {
	if s.testHook != nil {
		s.testHook(ctx, point)
	}
}

// clientGone releases the blocks pinned under key for a prefill leg whose answer, which
// names them, could not be written: its client left (kvtransfer.ReasonClientGone).
// vLLM and trtllm-serve keep such blocks until their timeout; the mock engine frees them
// at once, so that a client that leaves never makes it hold blocks nobody can read.
func (s *Server) clientGone(key string) {
	if s.xfer.srv.Drop(key, kvtransfer.ReasonClientGone) {
		s.log.Debug().Str("key", key).Msg("prefill leg's client gone before its answer: pinned KV blocks released")
	}
}

// writePrefillAnswer writes a prefill leg's JSON answer, which names its pinned blocks,
// and flushes it. It returns false when the client is gone: ctx ended before the write,
// or the write or flush failed (the caller then releases the blocks: clientGone).
func writePrefillAnswer(ctx context.Context, w http.ResponseWriter, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	if ctx.Err() != nil {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		return false
	}
	err = http.NewResponseController(w).Flush()
	return err == nil || errors.Is(err, http.ErrNotSupported)
}

// remoteKV names the pinned blocks a decode leg reads.
type remoteKV struct {
	addr     string // host:port of the prefill engine's transfer port
	engineID string // "" accepts any (SGLang)
	key      string
	blockIDs []int64 // nil: the pin's (SGLang)
	wait     time.Duration
}

// transferError is a failed read (a KV load failure), answered by each dialect in its
// error shape unless the decode leg recomputes the prompt.
type transferError struct {
	field string // the transfer parameter the prefill engine refused, "" when none is
	msg   string
}

// pullKV reads rk's blocks and returns how many prompt tokens of a prompt of promptLen
// they hold (at most promptLen: the engine recomputes the last one). A failed read — the
// prefill engine unreachable, silent past the read timeout (kvtransfer.ErrStalled), gone
// in the middle, refusing (the blocks are not pinned there any more, another engine
// answers at that port), or holding blocks of another size — is counted and returned as
// a *transferError, except with the recompute policy: then it is logged and counted
// (MetricKVRecomputed) and pullKV returns 0 tokens and no error, so that the decode leg
// computes the whole prompt itself. A read cut short because ctx ended reports ctx's
// error in the message; the caller answers nothing then.
func (s *Server) pullKV(ctx context.Context, rk remoteKV, promptLen int) (int, *transferError) {
	t := s.xfer
	res, err := t.client.Read(ctx, rk.addr, kvtransfer.Request{EngineID: rk.engineID, Key: rk.key,
		BlockIDs: rk.blockIDs, WaitMillis: rk.wait.Milliseconds()}, func(r kvtransfer.Response) error {
		switch {
		case r.BlockSize != t.blockSize:
			return &kvtransfer.RemoteError{Message: fmt.Sprintf("the prefill engine at %s has KV blocks of %d tokens, this engine %d",
				rk.addr, r.BlockSize, t.blockSize)}
		case r.BytesPerToken != t.bpt:
			return &kvtransfer.RemoteError{Message: fmt.Sprintf("the prefill engine at %s holds %d KV bytes per token, this engine %d (another model?)",
				rk.addr, r.BytesPerToken, t.bpt)}
		case int64(len(r.BlockIDs))*int64(t.blockSize) > int64(promptLen)+int64(t.blockSize)-1:
			return &kvtransfer.RemoteError{Field: "remote_block_ids", Message: fmt.Sprintf("%d blocks of %d tokens are more than the prompt's %d tokens fill",
				len(r.BlockIDs), t.blockSize, promptLen)}
		}
		return nil
	})
	if err != nil {
		t.failed.Inc()
		if t.nixl != nil {
			t.nixl.failed.Inc()
		}
		terr := &transferError{msg: fmt.Sprintf("KV transfer from %s failed: %v", rk.addr, err)}
		var re *kvtransfer.RemoteError
		if errors.As(err, &re) {
			terr.field, terr.msg = re.Field, fmt.Sprintf("KV transfer from %s refused: %s", rk.addr, re.Message)
		}
		if ctx.Err() != nil || !t.recompute {
			return 0, terr
		}
		t.recomputed.Inc()
		s.log.Warn().Str("from", rk.addr).Str("key", rk.key).Str("error", terr.msg).
			Msg("KV load failed: the decode leg computes the prompt itself (kv_load_failure_policy recompute)")
		return 0, nil
	}
	t.reads.Inc()
	t.bytes.Add(int(res.Bytes))
	t.seconds.Add(res.Duration.Seconds())
	if t.nixl != nil {
		t.nixl.time.Update(res.Duration.Seconds())
		t.nixl.bytes.Update(float64(res.Bytes))
	}
	s.log.Debug().Str("from", rk.addr).Str("key", rk.key).Int64("bytes", res.Bytes).Dur("duration", res.Duration).Msg("KV blocks read")
	return min(len(res.BlockIDs)*t.blockSize, promptLen), nil
}
