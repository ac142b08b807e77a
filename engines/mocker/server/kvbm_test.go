package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/internal/redistest"
	"github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/kvbm/resp"
)

// startRedisServer runs Debian's redis-server on a free port (redistest.StartRedisServer).
func startRedisServer(t *testing.T) string { return redistest.StartRedisServer(t) }

func idsJSON(from, n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, from+i)
	}
	b.WriteByte(']')
	return b.String()
}

// An engine with --kvbm-url offloads the blocks its GPU cache evicts and onboards them
// when a prompt needs them again: its usage counts them as cached, and /metrics has the
// tiers' counters.
func TestKvbmOffloadOnboard(t *testing.T) {
	addr := startRedisServer(t)
	opts := testOptions(t)
	opts.Engine.NumGPUBlocks, opts.Engine.MaxModelLen = 24, 384
	opts.KVTransfer.BytesPerToken = 1024
	opts.KvbmURL = "resp://" + addr
	s, hs := startServer(t, opts)
	send := func(from, n int) int {
		t.Helper()
		resp, b := post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1,"ignore_eos":true}`, idsJSON(from, n)))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		u := decodeMap(t, b)["usage"].(map[string]any)
		return int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
	}
	send(1000, 16*20+1) // 20 full blocks
	send(5000, 16*23+1) // evicts them: offloaded
	if err := s.kvbm.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := send(1000, 16*20+1); got != 16*20 {
		t.Fatalf("cached_tokens %d, want 320 (20 blocks onboarded)", got)
	}
	st := s.Stats().Tiers
	if st.OnboardedBlocks[1] != 20 || st.OnboardedBytes[1] != 20*16*1024 {
		t.Fatalf("tier stats %+v", st)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`turbine_mocker_kv_onboarded_blocks_total{tier="host"} 20`,
		`turbine_mocker_kv_tier_prefix_hits_total{tier="host"} 320`,
		`vllm:external_prefix_cache_hits_total{model_name="turbine-mock",engine="0"} 320`,
		`turbine_mocker_kvbm_offloads_total{result="dropped"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(string(body), `turbine_mocker_kv_offloaded_blocks_total `) {
		t.Error("/metrics lacks the offloaded blocks")
	}
}

// An engine whose block manager is not listening starts and serves (the mock engines of
// `turbine node --kvbm-external` crash-looped when it was down): its offloads are
// dropped and counted, /metrics says the block manager is down, and the client
// reconnects when a RESP server appears on the port.
func TestKvbmUnreachableAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	opts := testOptions(t)
	opts.Engine.NumGPUBlocks, opts.Engine.MaxModelLen = 24, 384
	opts.KVTransfer.BytesPerToken = 1024
	opts.KvbmURL = "resp://" + addr
	s, hs := startServer(t, opts)
	for _, from := range []int{1000, 5000} { // the second evicts the first's blocks
		resp, b := post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":1,"ignore_eos":true}`, idsJSON(from, 16*22+1)))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	if st := s.kvbm.Stats(); st.Up || st.Unreachable == 0 || st.Offloaded != 0 {
		t.Fatalf("client stats %+v: want down, offloads dropped as unreachable", st)
	}
	body := getMetrics(t, hs.URL)
	for _, want := range []string{MetricKvbmUp + " 0", MetricKvbmOffloads + `{result="unreachable"} `} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := resp.New(kvbmStore(t), resp.Options{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.kvbm.WaitUp(ctx); err != nil {
		t.Fatalf("not reconnected: %v", err)
	}
	if body := getMetrics(t, hs.URL); !strings.Contains(body, MetricKvbmUp+" 1") {
		t.Errorf("/metrics lacks %s 1 after reconnection", MetricKvbmUp)
	}
}

func kvbmStore(t *testing.T) *kvbm.Store {
	t.Helper()
	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func getMetrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestKvbmURLErrors(t *testing.T) {
	opts := testOptions(t)
	opts.KvbmURL = "lm://127.0.0.1:1"
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "--kvbm-url") {
		t.Fatalf("error %v, want one naming --kvbm-url", err)
	}
	opts.KvbmURL = "resp://127.0.0.1:6379"
	opts.Engine.EnablePrefixCaching = false
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "prefix caching") {
		t.Fatalf("error %v, want prefix caching needed", err)
	}
}
