package sglang

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

func TestGenerateBody(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	seed := int64(-3)
	cases := []struct {
		name string
		req  GenerateRequest
		want string
	}{
		{"minimal", GenerateRequest{RID: "r1", InputIDs: []uint32{1, 2, 3}, Sampling: SamplingParams{MaxNewTokens: 4}},
			`{"rid":"r1","input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4},"stream":true}`},
		{"everything", GenerateRequest{RID: "r\"2", InputIDs: []uint32{0, 4294967295},
			Sampling: SamplingParams{MaxNewTokens: 9, MinNewTokens: 2, Temperature: f(0), TopP: f(0.9), TopK: 20, MinP: f(0.05),
				FrequencyPenalty: f(0.5), PresencePenalty: f(-0.5), RepetitionPenalty: f(1.1), StopTokenIDs: []uint32{7, 8},
				IgnoreEOS: true, Seed: &seed, Extra: map[string]any{"max_new_tokens": 1000, "no_stop_trim": true}},
			Extra: map[string]any{"bootstrap_room": 42, "rid": "ignored", "bootstrap_host": "10.0.0.1"}},
			`{"bootstrap_host":"10.0.0.1","bootstrap_room":42,"rid":"r\"2","input_ids":[0,4294967295],"sampling_params":{"no_stop_trim":true,"max_new_tokens":9,"min_new_tokens":2,"temperature":0,"top_p":0.9,"min_p":0.05,"frequency_penalty":0.5,"presence_penalty":-0.5,"repetition_penalty":1.1,"top_k":20,"stop_token_ids":[7,8],"ignore_eos":true,"sampling_seed":-3},"stream":true}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := generateBody(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("body\n got %s\nwant %s", b, tc.want)
			}
			if !json.Valid(b) {
				t.Fatal("not JSON")
			}
		})
	}
	nan := 0.0
	nan = nan / nan
	if _, err := generateBody(GenerateRequest{RID: "r", InputIDs: []uint32{1}, Sampling: SamplingParams{MaxNewTokens: 1, TopP: &nan}}); err == nil || !strings.Contains(err.Error(), "top_p") {
		t.Fatalf("NaN top_p: %v", err)
	}
}

func TestGenerateRefusesInvalidRequests(t *testing.T) {
	c, _ := New("http://127.0.0.1:1", nil, Options{})
	for _, r := range []GenerateRequest{
		{InputIDs: []uint32{1}, Sampling: SamplingParams{MaxNewTokens: 1}},
		{RID: "r", Sampling: SamplingParams{MaxNewTokens: 1}},
		{RID: "r", InputIDs: []uint32{1}},
		{RID: "r", InputIDs: []uint32{1}, Sampling: SamplingParams{MaxNewTokens: 1, MinNewTokens: 2}},
	} {
		if _, err := c.Generate(t.Context(), r); err == nil || !strings.HasPrefix(err.Error(), "sglang: ") {
			t.Fatalf("%+v: %v", r, err)
		}
	}
	for _, u := range []string{"", "127.0.0.1:30000", "ftp://h:1", "http://"} {
		if _, err := New(u, nil, Options{}); err == nil {
			t.Fatalf("New(%q) accepted", u)
		}
	}
}

func TestIDList(t *testing.T) {
	cases := []struct {
		raw     string
		skip    int
		tail    []uint32
		n       int
		before  uint32
		wantErr bool
	}{
		{raw: `[]`, n: 0},
		{raw: ` [ 1 , 2,3 ] `, tail: []uint32{1, 2, 3}, n: 3},
		{raw: `[1,2,3]`, skip: 2, tail: []uint32{3}, n: 3, before: 2},
		{raw: `[1,2,3]`, skip: 3, n: 3, before: 3},
		{raw: `[1,2]`, skip: 3, n: 2},
		{raw: `[0,4294967295]`, tail: []uint32{0, 4294967295}, n: 2},
		{raw: `[4294967296]`, wantErr: true},
		{raw: `[01]`, wantErr: true},
		{raw: `[-1]`, wantErr: true},
		{raw: `[1.5]`, wantErr: true},
		{raw: `[1,]`, wantErr: true},
		{raw: `[1`, wantErr: true},
		{raw: `[1] x`, wantErr: true},
		{raw: `null`, wantErr: true},
		{raw: `["1"]`, wantErr: true},
	}
	for _, tc := range cases {
		tail, n, before, err := idList([]byte(tc.raw), tc.skip)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.raw)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(tail, tc.tail) || n != tc.n || before != tc.before {
			t.Errorf("%s skip %d: %v %d %d %v", tc.raw, tc.skip, tail, n, before, err)
		}
	}
}

func FuzzIDList(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, `[4294967295, 0]`, `[1,`, `x`} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, raw []byte, skip int) {
		if skip < 0 || skip > 1<<20 {
			return
		}
		tail, n, _, err := idList(raw, skip)
		if err != nil {
			return
		}
		var ref []int64
		if json.Unmarshal(raw, &ref) != nil {
			t.Fatalf("idList accepted %q, encoding/json refuses it", raw)
		}
		if len(ref) != n {
			t.Fatalf("%q: %d ids, json says %d", raw, n, len(ref))
		}
		if want := max(0, n-skip); len(tail) != want {
			t.Fatalf("%q skip %d: tail of %d", raw, skip, len(tail))
		}
		for i, v := range tail {
			if int64(v) != ref[skip+i] {
				t.Fatalf("%q: id %d is %d, json says %d", raw, skip+i, v, ref[skip+i])
			}
		}
	})
}

func TestSamplingAndLoadMapping(t *testing.T) {
	s := &messages.SamplingParams{MaxTokens: 10, MinTokens: 2, IgnoreEos: true, StopTokenIds: []uint32{5},
		Temperature: proto.Float64(0.5), Seed: proto.Int64(9), PresencePenalty: 0.25}
	p := samplingFrom(s)
	if p.MaxNewTokens != 10 || p.MinNewTokens != 2 || !p.IgnoreEOS || !reflect.DeepEqual(p.StopTokenIDs, []uint32{5}) ||
		*p.Temperature != 0.5 || p.TopP != nil || *p.Seed != 9 || *p.PresencePenalty != 0.25 || p.FrequencyPenalty != nil {
		t.Fatalf("%+v", p)
	}
	cases := []struct {
		l         Load
		bs        int
		total, at int64
	}{
		{Load{Running: 2, Queued: 1, TokenUsage: 0.5, UsedTokens: 33, MaxTotalTokens: 128}, 16, 8, 3},
		{Load{TokenUsage: 0.25, MaxTotalTokens: 128}, 16, 8, 2},
		{Load{}, 16, 0, 0},
	}
	for _, tc := range cases {
		w := workerLoad(tc.l, tc.bs)
		if w.TotalBlocks != tc.total || w.ActiveBlocks != tc.at || w.Running != int32(tc.l.Running) ||
			w.Waiting != int32(tc.l.Queued) || w.KvUsage != tc.l.TokenUsage {
			t.Errorf("%+v: %v", tc.l, w)
		}
	}
	if _, err := NewEngine(nil, 0); err == nil {
		t.Fatal("block size 0 accepted")
	}
}
