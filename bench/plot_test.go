package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPlot(t *testing.T) {
	a := Summary{Label: "kv", TTFTCDF: quantiles([]float64{1, 2, 3}), ITLCDF: quantiles([]float64{0.5, 1}), ThroughputBucketS: 0.5, Throughput: []float64{10, 20, 5}}
	b := Summary{Label: "round-robin", TTFTCDF: quantiles([]float64{2, 4}), ITLCDF: quantiles([]float64{1}), ThroughputBucketS: 1, Throughput: []float64{8}}
	var buf bytes.Buffer
	if err := Plot(&buf, []Summary{a, b}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, want := range []string{"<svg", "TTFT CDF", "ITL CDF", "Output throughput", "kv", "round-robin"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG has no %q", want)
		}
	}
	dec := xml.NewDecoder(&buf)
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	if err := Plot(io.Discard, nil); err == nil {
		t.Error("Plot of no run: no error")
	}
	if err := Plot(io.Discard, []Summary{{Label: "empty"}}); err != nil {
		t.Errorf("Plot of a run without samples: %v", err)
	}
}

// TestPlotLabelXML: a label with characters XML cannot hold (control characters, even
// escaped; invalid UTF-8; U+FFFE) passed straight to Plot still gives well-formed SVG,
// the characters drawn as U+FFFD; characters XML can hold are kept (markup escaped).
func TestPlotLabelXML(t *testing.T) {
	for _, tc := range []struct{ label, want string }{
		{"a\x01b", "a\ufffdb"},
		{"nul\x00", "nul\ufffd"},
		{"esc\x1b[31m", "esc\ufffd[31m"},
		{"del\x7f", "del\x7f"}, // XML 1.0 holds U+007F
		{"bad \xff\xfe utf-8", "bad \ufffd\ufffd utf-8"},
		{"non-char \ufffe", "non-char \ufffd"},
		{"<kv & rr>", "<kv & rr>"},
		{"emoji 🚀 中文", "emoji 🚀 中文"},
	} {
		t.Run(fmt.Sprintf("%q", tc.label), func(t *testing.T) {
			s := Summary{Label: tc.label, TTFTCDF: quantiles([]float64{1, 2}), ThroughputBucketS: 1, Throughput: []float64{3}}
			var buf bytes.Buffer
			if err := Plot(&buf, []Summary{s}); err != nil {
				t.Fatal(err)
			}
			dec := xml.NewDecoder(&buf)
			var texts []string
			inText := false
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("SVG is not well-formed XML: %v", err)
				}
				switch tok := tok.(type) {
				case xml.StartElement:
					inText = tok.Name.Local == "text"
				case xml.CharData:
					if inText {
						texts = append(texts, string(tok))
					}
				case xml.EndElement:
					inText = false
				}
			}
			if !slices.Contains(texts, tc.want) {
				t.Fatalf("SVG texts %q: no legend %q", texts, tc.want)
			}
		})
	}
}

func TestPlotPNG(t *testing.T) {
	a := Summary{Label: "kv", TTFTCDF: quantiles([]float64{1, 2, 3}), ITLCDF: quantiles([]float64{0.5, 1}), ThroughputBucketS: 0.5, Throughput: []float64{10, 20, 5}}
	var buf bytes.Buffer
	if err := PlotAs(&buf, []Summary{a}, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// 30 cm × 10 cm at 150 dpi
	if b := img.Bounds(); b.Dx() != 1772 || b.Dy() != 591 {
		t.Errorf("PNG is %d×%d pixels, want 1772×591", b.Dx(), b.Dy())
	}
	if err := PlotAs(io.Discard, []Summary{a}, "gif"); err == nil || !strings.Contains(err.Error(), `"gif"`) {
		t.Errorf("format gif: %v, want an error naming it", err)
	}
}

func TestLegendName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kv", "kv"},
		{"exactly twenty-eight runes!!", "exactly twenty-eight runes!!"},
		{"mooncake_fast25_conversation_trace.jsonl (300 requests)", "mooncake_fast25_conversatio…"},
		{"ééééééééééééééééééééééééééééééé", "ééééééééééééééééééééééééééé…"},
	} {
		if got := legendName(tc.in); got != tc.want {
			t.Errorf("legendName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPlotExtremeValues: absurd series (latencies of 1e308 ms or +Inf, NaN, very long
// throughput series, a zero bucket width) draw without a panic and within bounds.
func TestPlotExtremeValues(t *testing.T) {
	huge := make([]float64, 101)
	for i := range huge {
		huge[i] = 1e308
	}
	mixed := quantiles([]float64{1, 2})
	mixed[50], mixed[100] = math.NaN(), math.Inf(1)
	long := make([]float64, 1_000_000)
	for i := range long {
		long[i] = float64(i % 7)
	}
	for _, tc := range []struct {
		name string
		s    Summary
	}{
		{"CDF all 1e308", Summary{TTFTCDF: huge, ITLCDF: huge}},
		{"CDF with NaN and +Inf", Summary{TTFTCDF: mixed, ITLCDF: mixed}},
		{"a million throughput buckets", Summary{ThroughputBucketS: 0.001, Throughput: long}},
		{"throughput without a bucket width", Summary{Throughput: []float64{1, 2}}},
		{"throughput of NaN and +Inf", Summary{ThroughputBucketS: 1, Throughput: []float64{math.NaN(), math.Inf(1), 1e308}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Plot(io.Discard, []Summary{tc.s}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if xys := overTime(0.001, long); len(xys) > maxPlotPoints {
		t.Fatalf("%d points drawn of a million buckets, want at most %d", len(xys), maxPlotPoints)
	}
	for _, xy := range cdf(huge) {
		if xy.X > MaxSummaryMillis {
			t.Fatalf("CDF point at %v ms, want at most %v", xy.X, MaxSummaryMillis)
		}
	}
}

// TestReadSummaryLimits: a summary whose series no run gives is an error naming the
// file and the field, before anything is plotted.
func TestReadSummaryLimits(t *testing.T) {
	cdf101 := func(v string) string { return "[" + strings.TrimSuffix(strings.Repeat(v+",", 101), ",") + "]" }
	descending := make([]string, 101)
	for i := range descending {
		descending[i] = strconv.Itoa(200 - i)
	}
	notDecreasing := make([]string, 101)
	for i := range notDecreasing {
		notDecreasing[i] = strconv.Itoa(i / 10)
	}
	// dists are the TTFT and E2E distributions of n successful requests.
	dists := func(n int) string {
		d := `{"count":` + strconv.Itoa(n) + `,"mean":2,"p50":2,"p90":2,"p99":2,"min":1,"max":3}`
		return `"ttft_ms":` + d + `,"e2e_ms":` + d
	}
	// summary is a summary of 2 successful requests with the given fields.
	summary := func(fields string) string {
		if fields == "" {
			return `{"requests":2,"succeeded":2,"failed":0,` + dists(2) + `}`
		}
		return `{"requests":2,"succeeded":2,"failed":0,` + dists(2) + `,` + fields + `}`
	}
	// latency is a summary of 2 successful requests with the given latency fields.
	latency := func(fields string) string { return `{"requests":2,"succeeded":2,"failed":0,` + fields + `}` }
	ok := `{"count":2,"mean":2,"p50":2,"p90":2,"p99":2,"min":1,"max":3}`
	for _, tc := range []struct {
		name, json, want string
	}{
		{"valid", summary(`"label":"a","ttft_cdf_ms":` + cdf101("1.5") + `,"itl_cdf_ms":[],"throughput_bucket_s":1,"throughput_tokens_per_s":[3,4]`), ""},
		{"no samples", `{"requests":0,"succeeded":0,"failed":0,"errors":{},"ttft_cdf_ms":null,"itl_cdf_ms":null,"throughput_bucket_s":0,"throughput_tokens_per_s":null}`, ""},
		{"failures", `{"requests":3,"succeeded":1,"failed":2,"errors":{"timeout":1,"http_503":1},` + dists(1) + `}`, ""},
		{"TTFT count not the successes", latency(`"ttft_ms":{"count":5,"mean":2,"p50":2,"p90":2,"p99":2,"min":1,"max":3},"e2e_ms":` + ok), "s.json: ttft_ms.count 5: want 2"},
		{"negative p50", latency(`"ttft_ms":{"count":2,"mean":2,"p50":-1,"p90":2,"p99":2,"min":1,"max":3},"e2e_ms":` + ok), "s.json: ttft_ms (min, p50, p90, p99, max, mean)[1] = -1: want a number from 0"},
		{"p99 above max", latency(`"ttft_ms":` + ok + `,"e2e_ms":{"count":2,"mean":2,"p50":2,"p90":2,"p99":4,"min":1,"max":3}`), "s.json: e2e_ms: min 1, p50 2, p90 2, p99 4, max 3"},
		{"mean outside", latency(`"ttft_ms":` + ok + `,"e2e_ms":{"count":2,"mean":9,"p50":2,"p90":2,"p99":2,"min":1,"max":3}`), "s.json: e2e_ms: min 1"},
		{"ITL values without samples", summary(`"itl_ms":{"count":0,"mean":1}`), "s.json: itl_ms: values without samples"},
		{"latencies with no success", `{"requests":1,"succeeded":0,"failed":1,"errors":{"timeout":1},"ttft_ms":` + ok + `}`, "s.json: ttft_ms.count 2: want 0"},
		{"error kind with a control character", `{"requests":1,"succeeded":0,"failed":1,"errors":{"a\u001bb":1}}`, `s.json: errors: kind "a\x1bb": has a control character`},
		{"CDF of 1e308", summary(`"ttft_cdf_ms":` + cdf101("1e308")), "s.json: ttft_cdf_ms[0] = 1e+308: want a number from 0 to 1e+12"},
		{"negative latency", summary(`"itl_cdf_ms":` + cdf101("-1")), "s.json: itl_cdf_ms[0] = -1"},
		{"CDF of 3 points", summary(`"ttft_cdf_ms":[1,2,3]`), "s.json: ttft_cdf_ms has 3 points: want 101"},
		{"descending TTFT CDF", summary(`"ttft_cdf_ms":[` + strings.Join(descending, ",") + `]`),
			"s.json: ttft_cdf_ms[1] = 199 is below ttft_cdf_ms[0] = 200: want percentiles in non-decreasing order"},
		{"ITL CDF going down at the end", summary(`"itl_cdf_ms":[` + strings.Join(notDecreasing[:100], ",") + `,0]`), "s.json: itl_cdf_ms[100] = 0 is below itl_cdf_ms[99] = 9"},
		{"CDF with steps", summary(`"itl_cdf_ms":[` + strings.Join(notDecreasing, ",") + `]`), ""},
		{"too many throughput points", summary(`"throughput_bucket_s":1,"throughput_tokens_per_s":[` + strings.TrimSuffix(strings.Repeat("1,", MaxThroughputPoints+1), ",") + `]`),
			"s.json: throughput_tokens_per_s has 10001 points: want at most 10000"},
		{"no bucket width", summary(`"throughput_tokens_per_s":[1]`), "s.json: throughput_bucket_s 0"},
		{"bucket of 1e-300 s", summary(`"throughput_bucket_s":1e-300,"throughput_tokens_per_s":[1]`), "s.json: throughput_bucket_s 1e-300: want a number of seconds from 0.001 to 2.592e+06"},
		{"bucket of 1e-300 s without buckets", summary(`"throughput_bucket_s":1e-300`), "s.json: throughput_bucket_s 1e-300 without throughput_tokens_per_s: want 0"},
		{"bucket below 1 ms", summary(`"throughput_bucket_s":0.0009,"throughput_tokens_per_s":[1]`), "s.json: throughput_bucket_s 0.0009"},
		{"bucket of 1 ms", summary(`"throughput_bucket_s":0.001,"throughput_tokens_per_s":[1]`), ""},
		{"bucket of 30 days", summary(`"throughput_bucket_s":2592000,"throughput_tokens_per_s":[1]`), ""},
		{"bucket over 30 days", summary(`"throughput_bucket_s":2592001,"throughput_tokens_per_s":[1]`), "s.json: throughput_bucket_s 2.592001e+06"},
		{"absurd rate", summary(`"throughput_bucket_s":1,"throughput_tokens_per_s":[1e300]`), "s.json: throughput_tokens_per_s[0] = 1e+300"},
		{"not json", `{`, "s.json: not a benchmark summary"},
		{"null", `null`, "s.json: JSON null: not a benchmark summary (want a JSON object)"},
		{"array", `[1]`, "s.json: a JSON array: not a benchmark summary (want a JSON object)"},
		{"number", ` 7 `, "s.json: a JSON number: not a benchmark summary"},
		{"empty object", `{}`, "s.json: no requests field: not a benchmark summary"},
		{"requests null", `{"requests":null,"succeeded":0,"failed":0}`, "s.json: no requests field"},
		{"other JSON", `{"model":"m","choices":[]}`, "s.json: no requests field"},
		{"negative count", `{"requests":-1,"succeeded":0,"failed":-1}`, "s.json: requests -1, succeeded 0, failed -1, not_sent 0: want counts >= 0"},
		{"negative not_sent", `{"requests":0,"succeeded":0,"failed":0,"not_sent":-3}`, "s.json: requests 0, succeeded 0, failed 0, not_sent -3: want counts >= 0"},
		{"stopped", `{"requests":1,"succeeded":1,"failed":0,"not_sent":3,` + dists(1) + `}`, ""},
		{"counts do not add up", `{"requests":5,"succeeded":2,"failed":2,"errors":{"timeout":2}}`, "s.json: succeeded 2 + failed 2 is not requests 5"},
		{"errors do not add up", `{"requests":5,"succeeded":2,"failed":3,"errors":{"timeout":2}}`, "s.json: errors add up to 2: want failed (3)"},
		{"zero error count", `{"requests":1,"succeeded":1,"failed":0,"errors":{"timeout":0},` + dists(1) + `}`, `s.json: errors["timeout"] = 0`},
		{"label with a control character", summary(`"label":"a\u0001b"`), `s.json: label "a\x01b": has a control character (U+0001 at byte 1)`},
		{"label with a tab", summary(`"label":"a\tb"`), `s.json: label "a\tb": has a control character (U+0009`},
		{"label with a C1 control", summary(`"label":"\u0085"`), `s.json: label "\u0085": has a control character (U+0085`},
		{"label of invalid UTF-8", summary(`"label":"a` + "\xff" + `b"`), "s.json: label: not valid UTF-8"},
		{"label of U+FFFD", summary(`"label":"a\ufffdb 中文"`), ""},
		{"too large", `{"requests":0,"label":"` + strings.Repeat("x", MaxSummaryBytes) + `"}`, "s.json: larger than 16 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSummary(strings.NewReader(tc.json), "s.json")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestReadSummaryRoundTrip: ReadSummary reads back what WriteSummary writes of a run's
// summary, however the run went (all valid, failures, nothing sent, a long run of
// 1-second buckets, a run of a few ms whose buckets are 1 ms wide).
func TestReadSummaryRoundTrip(t *testing.T) {
	ok := func(start, ttft time.Duration, itl ...time.Duration) Result {
		return Result{Start: start, TTFT: ttft, ITL: itl, E2E: ttft + 10*time.Millisecond, OutputTokens: 1 + len(itl)}
	}
	for _, tc := range []struct {
		name string
		o    Outcome
	}{
		{"valid", Outcome{Results: []Result{ok(0, 5*time.Millisecond, time.Millisecond), ok(time.Second, 7*time.Millisecond)}, Duration: 2 * time.Second}},
		{"failures", Outcome{Results: []Result{ok(0, time.Millisecond), {Error: ErrTimeout}, {Error: ErrTimeout}, {Error: "http_503"}}, Duration: time.Minute}},
		{"nothing sent", Outcome{}},
		{"all failed", Outcome{Results: []Result{{Error: ErrConnect}}, Duration: time.Millisecond}},
		{"a few ms", Outcome{Results: []Result{ok(0, time.Millisecond)}, Duration: 3 * time.Millisecond}},
		{"30 days", Outcome{Results: []Result{ok(MaxArrival-time.Second, time.Second)}, Duration: MaxArrival + time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSummary(&buf, Summarize(tc.o)); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadSummary(&buf, "s.json"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCheckLabel(t *testing.T) {
	for _, tc := range []struct{ label, want string }{
		{"", ""},
		{"kv", ""},
		{"kv <&> 中文 🚀 \ufffd", ""},
		{"a\x01b", "has a control character (U+0001 at byte 1)"},
		{"line\nbreak", "has a control character (U+000A at byte 4)"},
		{"del\x7f", "has a control character (U+007F at byte 3)"},
		{"é\u009b", "has a control character (U+009B at byte 2)"},
		{"a\xffb", "not valid UTF-8"},
	} {
		err := CheckLabel(tc.label)
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("CheckLabel(%q) = %v, want %q", tc.label, err, tc.want)
		}
	}
}
