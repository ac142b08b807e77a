package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// referenceDecode is what decodeBody must agree with: encoding/json into an `any`, with
// numbers as json.Number and nothing but space after the value.
func referenceDecode(body []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return v, true
}

// expandIDs replaces every idArray in a decoded tree with the []any of json.Number that
// encoding/json would have built.
func expandIDs(v any) any {
	switch v := v.(type) {
	case idArray:
		out, _ := arrayOf(v)
		return out
	case []any:
		for i, x := range v {
			v[i] = expandIDs(x)
		}
	case map[string]any:
		for k, x := range v {
			v[k] = expandIDs(x)
		}
	}
	return v
}

// checkAgainstReference fails when decodeBody and encoding/json disagree on whether body
// is valid JSON or on its value.
func checkAgainstReference(t *testing.T, body []byte) {
	t.Helper()
	want, wantOK := referenceDecode(body)
	got, err := decodeBody(body)
	if (err == nil) != wantOK {
		t.Fatalf("%q: decodeBody error %v, encoding/json valid %v", body, err, wantOK)
	}
	if err != nil {
		return
	}
	if got = expandIDs(got); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decodeBody %#v, encoding/json %#v", body, got, want)
	}
}

var decodeCases = []string{
	`{}`, `[]`, ` {"a" : 1 } `, "\t\r\n{\"a\":[]}\n", `null`, `true`, `false`, `"s"`, `0`, `-0`, `-0.5e+3`,
	`{"prompt":[1,2,3]}`, `{"prompt":[ 1 , 2 ,3 ]}`, `{"prompt":[[0,4294967295]]}`, `{"prompt":[4294967296]}`,
	`{"prompt":[1,-2]}`, `{"prompt":[1,2.0]}`, `{"prompt":[1,2e1]}`, `{"prompt":[1,"a"]}`, `{"prompt":[01]}`,
	`{"prompt":[1,]}`, `{"prompt":[1 2]}`, `{"prompt":[1,2`, `{"prompt":[99999999999]}`, `{"prompt":[1,null]}`,
	`{"a":1,"a":2}`, `{"a":"\u00e9\ud83d\ude00\n\"\\\/"}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\xfe\"}", "{\"a\":\"é\"}",
	`{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":"abc`, `{"a":"abc\"}`, `{"a" 1}`, `{a:1}`, `{"a":1,}`, `{,}`, `[,]`,
	`{"a":tru}`, `{"a":nul}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":+1}`, `{"a":1}x`,
	`{"a":1}{}`, ``, ` `, `{"a":[{"b":[1,{"c":null}]}]}`, `[[[[]]]]`, `{"a":1.5E-10}`, `{"":0}`, "\ufeff{}",
	`{"prompt":[18446744073709551617]}`, `{"prompt":[1,184467440737095516170]}`, `{"prompt":[1,[2]]}`,
	`{"prompt":[1,2],"b":"]]"}`, `{"prompt":[1,2,"]"]}`, "{\"prompt\":[1\n,\t2\r]}",
}

func TestDecodeBodyMatchesEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		checkAgainstReference(t, []byte(c))
	}
}

func TestDecodeBodyTokenIDArrays(t *testing.T) {
	for _, tc := range []struct {
		body string
		ids  bool // the prompt decodes to an idArray
	}{
		{`{"prompt":[1,2,3]}`, true},
		{`{"prompt":[0, 4294967295]}`, true},
		{`{"prompt":[4294967296]}`, false},
		{`{"prompt":[1,2.0]}`, false},
		{`{"prompt":[1,-1]}`, false},
		{`{"prompt":[]}`, false},
		{`{"prompt":[18446744073709551617]}`, false},
		{`{"prompt":[9999999999]}`, false},
		{`{"prompt":[1,[2]]}`, false},
		{`{"prompt":[1,2],"b":"]]"}`, true},
		{"{\"prompt\":[1\n,\t2\r]}", true},
	} {
		v, err := decodeBody([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		_, isIDs := v.(map[string]any)["prompt"].(idArray)
		if isIDs != tc.ids {
			t.Errorf("%s: prompt decoded as idArray %v, want %v", tc.body, isIDs, tc.ids)
		}
	}
}

func TestDecodeBodyDepth(t *testing.T) {
	deep := bytes.Repeat([]byte("["), maxJSONDepth+1)
	deep = append(deep, bytes.Repeat([]byte("]"), maxJSONDepth+1)...)
	if _, err := decodeBody(deep); err == nil {
		t.Fatalf("%d nested arrays accepted", maxJSONDepth+1)
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAgainstReference(t, body)
	})
}

// BenchmarkParseCompletionTokenIDs parses a completions body with a 4,096-token id
// prompt; reports µs per request.
func BenchmarkParseCompletionTokenIDs(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"model":"m","stream":true,"max_tokens":2,"prompt":[`)
	for i := range 4096 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprint(&body, (i*7919)%100000)
	}
	body.WriteString(`]}`)
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseCompletionRequest(body.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/request")
}

// TestDecodeBodyNestedArraysStayCheap: arrays nested to the depth limit, each opening
// with an id and holding the next, around a long string, decode (or fail) with
// allocations bounded by the body's size, not its size times its depth.
func TestDecodeBodyNestedArraysStayCheap(t *testing.T) {
	const depth = 2000
	var body bytes.Buffer
	body.WriteString(`{"a":`)
	for range depth {
		body.WriteString(`[0,`)
	}
	body.WriteString(`"` + strings.Repeat(",", 1<<20) + `"`)
	for range depth {
		body.WriteString(`]`)
	}
	body.WriteString(`}`)
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := decodeBody(body.Bytes()); err != nil {
			t.Fatal(err)
		}
	})
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if _, err := decodeBody(body.Bytes()); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 64<<20 {
		t.Errorf("decoding a %d-byte body of %d nested arrays allocated %d bytes (%v allocations)", body.Len(), depth, got, allocs)
	}
}
