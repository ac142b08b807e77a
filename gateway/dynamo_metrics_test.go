package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDynamoBuckets: the bucket layouts are Dynamo's defaults, worked out by hand from
// its generate_log_buckets: 0, then log-spaced bounds up to max, every one (max too)
// rounded to 2 significant figures, so that 512 becomes 510.
func TestDynamoBuckets(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []float64
		want []float64
	}{
		{"request duration (1, 512, 10)", dynamoDurationBuckets, []float64{0, 2, 4, 8, 16, 32, 64, 130, 260, 510}},
		{"inter-token latency (0.001, 2, 13)", dynamoITLBuckets,
			[]float64{0, 0.0019, 0.0035, 0.0067, 0.013, 0.024, 0.045, 0.084, 0.16, 0.3, 0.56, 1.1, 2}},
		{"output tokens (50, 32000, 10)", dynamoOSLBuckets, []float64{0, 100, 210, 430, 880, 1800, 3700, 7600, 16000, 32000}},
		{"repeats dropped", dynamoLogBuckets(1, 1.01, 4), []float64{0, 1}},
	} {
		if len(tc.got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
			continue
		}
		for i := range tc.want {
			if d := tc.got[i] - tc.want[i]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
				break
			}
		}
	}
	if n := len(dynamoTTFTBuckets); n != 18 || dynamoTTFTBuckets[n-1] != 480 {
		t.Errorf("TTFT buckets %v: want 18 ending at 480", dynamoTTFTBuckets)
	}
}

// TestDynamoErrorTypes: every catalogue kind has one of Dynamo's error types.
func TestDynamoErrorTypes(t *testing.T) {
	known := []string{"validation", "not_found", "overload", "unavailable", "cancelled", "not_implemented", "internal"}
	for _, e := range catalogue {
		k := e.Kind
		if got := dynamoErrorType(&k); !slices.Contains(known, got) {
			t.Errorf("%s: error_type %q", e.Name, got)
		}
	}
	for _, tc := range []struct {
		kind ErrorKind
		want string
	}{
		{KindInvalidValue, "validation"}, {KindModelNotFound, "not_found"}, {KindAllBusy, "overload"},
		{KindNoWorkers, "unavailable"}, {KindClientClosed, "cancelled"}, {KindEngineError, "internal"},
		{KindUnsupported, "not_implemented"},
	} {
		if got := dynamoErrorType(&tc.kind); got != tc.want {
			t.Errorf("%s: error_type %q, want %q", tc.kind.Entry().Name, got, tc.want)
		}
	}
	if got := dynamoErrorType(nil); got != "" {
		t.Errorf("success: error_type %q, want empty", got)
	}
}

// TestDynamoFamilies: one streamed request through a test gateway leaves every Dynamo
// family with Dynamo's labels and the same measurements as Turbine's families: in
// flight and queued until the first token, in flight after it, neither once done.
func TestDynamoFamilies(t *testing.T) {
	clk := &testClock{now: testTime}
	var s *Server
	const model = `{model="tiny"}`
	var beforeFirst, afterFirst [2]string // inflight, queued
	b := newFakeBackend(
		step{before: func() {
			beforeFirst = [2]string{metricValue(s, dynamoInflight+model), metricValue(s, dynamoQueued+model)}
			clk.advance(200 * time.Millisecond)()
		}, chunk: tokens("H").chunk},
		step{before: func() {
			afterFirst = [2]string{metricValue(s, dynamoInflight+model), metricValue(s, dynamoQueued+model)}
			clk.advance(30 * time.Millisecond)()
		}, chunk: finish("ey!", "stop").chunk},
	)
	s = newClockedServer(t, b, clk)
	if rr := serve(s, http.MethodPost, chatPath, `{"model":"tiny","stream":true,`+hiChat+`}`); rr.Code != 200 {
		t.Fatal(rr.Body.String())
	}
	if beforeFirst != [2]string{"1", "1"} || afterFirst != [2]string{"1", "0"} {
		t.Errorf("inflight, queued before the first token %v, after it %v; want [1 1], [1 0]", beforeFirst, afterFirst)
	}
	want := map[string]string{
		`dynamo_frontend_requests_total{model="tiny",endpoint="chat_completions",request_type="stream",status="success",error_type=""}`: "1",
		dynamoInflight + model:                              "0",
		dynamoQueued + model:                                "0",
		dynamoTTFT + `_sum` + model:                         "0.2",
		dynamoTTFT + `_count` + model:                       "1",
		dynamoITL + `_count` + model:                        "3",
		dynamoITL + `_bucket{model="tiny",le="0.0067"}`:     "0",
		dynamoITL + `_bucket{model="tiny",le="0.013"}`:      "3",
		dynamoDuration + `_sum` + model:                     "0.23",
		dynamoDuration + `_bucket{model="tiny",le="2"}`:     "1",
		dynamoISL + `_sum` + model:                          "21",
		dynamoOSL + `_sum` + model:                          "4",
		dynamoCachedTokens + `_sum` + model:                 "2",
		dynamoCachedTokens + `_bucket{model="tiny",le="0"}`: "0",
	}
	for series, v := range want {
		if got := metricValue(s, series); !closeTo(got, v) {
			t.Errorf("%s = %q, want %s", series, got, v)
		}
	}
}

// TestDynamoRequestOutcomes: failed and cancelled requests are counted with Dynamo's
// status, error_type and endpoint names, and leave no request queued.
func TestDynamoRequestOutcomes(t *testing.T) {
	b := newFakeBackend(tokens("Hel"), finish("lo", "stop"))
	s := newTestServer(t, b)
	serve(s, http.MethodPost, chatPath, `{"model":"tiny"}`) // no messages: 400
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	serveCtx(ctx, s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	b.genErr = ErrAllBusy
	serve(s, http.MethodPost, compPath, `{"model":"tiny","prompt":"x"}`)
	for series, v := range map[string]string{
		`dynamo_frontend_requests_total{model="",endpoint="chat_completions",request_type="unary",status="error",error_type="validation"}`:    "1",
		`dynamo_frontend_requests_total{model="tiny",endpoint="chat_completions",request_type="unary",status="error",error_type="cancelled"}`: "1",
		`dynamo_frontend_requests_total{model="tiny",endpoint="completions",request_type="unary",status="error",error_type="overload"}`:       "1",
		dynamoQueued + `{model="tiny"}`: "0",
	} {
		if got := metricValue(s, series); got != v {
			var page strings.Builder
			s.Metrics().WritePrometheus(&page)
			t.Errorf("%s = %q, want %s\n%s", series, got, v, page.String())
		}
	}
	if got := dynamoEndpoint(endpointMessages); got != "anthropic_messages" {
		t.Errorf("/v1/messages endpoint label %q, want anthropic_messages", got)
	}
}
