package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// instantStream answers every completion at once with maxTokens one-token frames that
// carry token ids (the gateway's return_token_ids shape), the usage chunk and [DONE]:
// the cheapest valid answer, so that a run measures the benchmark client itself.
func instantStream(w http.ResponseWriter, r *http.Request) {
	var b completionsBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range b.MaxTokens {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[%d],\"finish_reason\":null}]}\n\n", 1000+i)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n",
		len(b.Prompt), b.MaxTokens)
}

// BenchmarkClientOverhead runs b.N requests (128 prompt tokens, 4 output tokens) through
// the Runner at 256 in flight against an in-process endpoint that answers instantly, and
// reports the sustained request rate (req/s): the most the client can drive, with the
// endpoint's own cost on the same CPUs included.
func BenchmarkClientOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(instantStream))
	defer srv.Close()
	const concurrency = 256
	reqs, err := Synthetic(max(b.N, 1), 128, 4, 16, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = concurrency
	transport.MaxIdleConns = concurrency
	defer transport.CloseIdleConnections()
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", HTTP: &http.Client{Transport: transport}},
		Concurrency: concurrency, BlockTokens: 16}
	b.ResetTimer()
	start := time.Now()
	out := r.Run(context.Background(), reqs)
	elapsed := time.Since(start)
	b.StopTimer()
	if s := Summarize(out); s.Failed != 0 {
		b.Fatalf("%d of %d requests failed: %v", s.Failed, s.Requests, s.Errors)
	}
	b.ReportMetric(float64(len(reqs))/elapsed.Seconds(), "req/s")
}
