package epp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// envoyProxy plays Envoy in front of the model servers: for each HTTP request it asks the
// EPP over ext_proc (headers, then the body in pieces), forwards the (re-chunked) body to
// the first address of x-gateway-destination-endpoint and passes the answer back through
// the EPP chunk by chunk. failOpen is ext_proc's failure_mode_allow: when the EPP cannot
// be asked, forward to an endpoint of the pool (true) or answer 500 (false).
type envoyProxy struct {
	epp      extprocv3.ExternalProcessorClient
	failOpen bool
	pool     []string
}

func (p *envoyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	dest, newBody, st, imm, err := p.pick(r, body)
	if err != nil {
		if !p.failOpen {
			http.Error(w, "ext_proc failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		dest, newBody, st = p.pool[0], body, nil
	}
	if imm != nil {
		for _, h := range imm.GetHeaders().GetSetHeaders() {
			w.Header().Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
		}
		w.WriteHeader(int(imm.GetStatus().GetCode()))
		w.Write(imm.GetBody())
		return
	}
	primary, _, _ := strings.Cut(dest, ",")
	up, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+primary+r.URL.Path, bytes.NewReader(newBody))
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	up.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(up)
	if err != nil {
		http.Error(w, err.Error(), 503)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set("X-Served-By", primary)
	w.WriteHeader(resp.StatusCode)
	if st != nil {
		var md *corev3.Metadata = servedMD(primary)
		st.Send(respHeadersMsg(fmt.Sprint(resp.StatusCode), resp.Header.Get("Content-Type"), md))
		st.Recv()
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		eos := errors.Is(rerr, io.EOF)
		if n > 0 || eos {
			chunk := buf[:n]
			if st != nil {
				st.Send(respBodyMsg(string(chunk), eos))
				if r, err := st.Recv(); err == nil {
					chunk = r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()
				}
			}
			w.Write(chunk)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if rerr != nil {
			break
		}
	}
	if st != nil {
		st.CloseSend()
	}
}

// pick runs the request path over ext_proc.
func (p *envoyProxy) pick(r *http.Request, body []byte) (string, []byte, extprocv3.ExternalProcessor_ProcessClient, *extprocv3.ImmediateResponse, error) {
	st, err := p.epp.Process(r.Context(), grpc.WaitForReady(false))
	if err != nil {
		return "", nil, nil, nil, err
	}
	if err := st.Send(headersMsg(r.URL.Path, false, nil)); err != nil {
		return "", nil, nil, nil, err
	}
	for i, c := range Chunks(body, 8<<10) {
		if err := st.Send(bodyMsg(c, i == len(Chunks(body, 8<<10))-1)); err != nil {
			return "", nil, nil, nil, err
		}
	}
	var dest string
	var out []byte
	for {
		resp, err := st.Recv()
		if err != nil {
			return "", nil, nil, nil, err
		}
		switch v := resp.Response.(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return "", nil, nil, v.ImmediateResponse, nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			x := &exchange{headers: v.RequestHeaders}
			dest = x.destination()
		case *extprocv3.ProcessingResponse_RequestBody:
			sb := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			out = append(out, sb.GetBody()...)
			if sb.GetEndOfStream() {
				return dest, out, st, nil, nil
			}
		}
	}
}

// mockWorker is a mock engine (vLLM dialect) behind an HTTP server, counting requests.
type mockWorker struct {
	id, addr string
	mu       sync.Mutex
	served   int
}

func startMockWorker(t *testing.T, id string, m *model.Model) *mockWorker {
	cfg := mocker.DefaultConfig()
	cfg.BlockSize, cfg.NumGPUBlocks, cfg.MaxModelLen, cfg.SpeedupRatio = 16, 2048, 8192, 1000
	srv, err := server.New(server.Options{Params: server.Params{Engine: cfg, Dialect: server.DialectVLLM}, ServedModelName: "m", Model: m})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	w := &mockWorker{id: id}
	h := srv.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.served++
		w.mu.Unlock()
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	w.addr = strings.TrimPrefix(hs.URL, "http://")
	return w
}

func (w *mockWorker) count() int { w.mu.Lock(); defer w.mu.Unlock(); return w.served }

// TestEndToEnd: a gateway (the Go proxy) asks the EPP, which tokenizes with the card and
// asks the model's Router grain on a cluster member; two mock engines registered as
// workers serve. A repeated long prompt goes to the worker that served it first; an
// unknown model is a 404 from the EPP; with the EPP down, FailOpen still answers and
// FailClose answers 500.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster member and two mock engines")
	}
	m, err := model.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	member, err := cluster.Start(cluster.Config{Name: "epp-e2e", Host: "127.0.0.1", Discovery: "local", Logger: zerolog.Nop(),
		Kinds: []*pcluster.Kind{router.Kind(router.Config{Mode: kv.DefaultPolicy, OverlapWeight: 1, Logger: zerolog.Nop()}), catalog.Kind()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	card := &messages.ModelCard{Model: "m", Tokenizer: "builtin:cl100k_base", ContextLength: 8192, KvBlockSize: 16, TotalKvBlocks: 2048}
	workers := []*mockWorker{startMockWorker(t, "w1", m), startMockWorker(t, "w2", m)}
	for _, w := range workers {
		info := &messages.WorkerInfo{WorkerId: w.id, Actor: &messages.ActorRef{Address: member.Address(), Id: "worker/" + w.id}, Card: card,
			Ready: true, NoKvEvents: true, EngineUrl: "http://" + w.addr}
		ack, err := messages.GetRouterGrainClient(member.Cluster, "m").Register(&messages.RegisterWorker{Worker: info, Load: &messages.WorkerLoad{TotalBlocks: 2048}})
		if err != nil || !ack.GetAccepted() {
			t.Fatalf("register %s: %v %v", w.id, ack, err)
		}
		if _, err := messages.GetCatalogGrainClient(member.Cluster, catalog.Identity).Announce(&messages.AnnounceModel{Card: card, WorkerId: w.id, TtlMs: 60_000}); err != nil {
			t.Fatal(err)
		}
	}
	// The Router grain's Stats carry each worker's engine_url: the picker maps the chosen
	// worker to its endpoint from it.
	tb, err := NewClusterTurbine(member.Cluster, ClusterConfig{Logger: zerolog.Nop(), ModelCacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	src := newStatic(workers[0].addr, workers[1].addr)
	eppSrv := NewServer(&Picker{Source: src, Turbine: tb}, MachineConfig{}, nil, zerolog.Nop())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stopEPP := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- eppSrv.Serve(ctx, lis, hl, nil, time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	proxy := &envoyProxy{epp: extprocv3.NewExternalProcessorClient(conn), pool: []string{workers[0].addr}, failOpen: true}
	gw := httptest.NewServer(proxy)
	defer gw.Close()

	// The mock engine serves the token-level /v1/completions (chat is the frontend's), so
	// the gateway's clients here send completions with a text prompt.
	post := func(model, prompt string, stream bool) (*http.Response, string) {
		t.Helper()
		req := map[string]any{"model": model, "max_tokens": 4, "prompt": prompt}
		if stream {
			req["stream"], req["stream_options"] = true, map[string]any{"include_usage": true}
		}
		b, _ := json.Marshal(req)
		resp, err := http.Post(gw.URL+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	long := strings.Repeat("The quick brown fox jumps over the lazy dog near the river bank. ", 150) // ~2,000 tokens
	resp, body := post("m", long, true)
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	first := resp.Header.Get("X-Served-By")
	for i := 0; i < 3; i++ {
		resp, body = post("m", long, false)
		if resp.StatusCode != 200 {
			t.Fatalf("repeat %d: %d %s", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Served-By"); got != first {
			t.Fatalf("repeat %d of the long prompt went to %s, the first to %s", i, got, first)
		}
	}
	if resp, body := post("unknown-model", "hi", false); resp.StatusCode != 404 || !strings.Contains(body, "model") {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	// Every routed request is freed: the router tracks none once the answers ended.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := messages.GetRouterGrainClient(member.Cluster, "m").Stats(&messages.RouterStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, w := range st.GetWorkers() {
			active += int(w.GetActiveRequests())
		}
		if active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still tracked by the router", active)
		}
		time.Sleep(10 * time.Millisecond)
	}

	stopEPP()
	<-served
	if resp, body := post("m", "hi", false); resp.StatusCode != 200 {
		t.Errorf("FailOpen with the EPP down: %d %s", resp.StatusCode, body)
	}
	proxy.failOpen = false
	if resp, _ := post("m", "hi", false); resp.StatusCode != 500 {
		t.Errorf("FailClose with the EPP down: %d", resp.StatusCode)
	}
}
