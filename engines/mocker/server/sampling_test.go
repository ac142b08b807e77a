package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestSamplingFieldsPerDialect: each dialect takes a sampling field where its engine
// takes it and answers the engine's 400 for one it would refuse (bad values included).
func TestSamplingFieldsPerDialect(t *testing.T) {
	dialects := map[DialectName]struct {
		path string
		wrap func(fields string) string // a request body with fields added
	}{
		DialectVLLM: {"/v1/completions", func(f string) string {
			return `{"prompt":[1,2,3],"max_tokens":2` + f + `}`
		}},
		DialectSGLang: {"/generate", func(f string) string {
			top, sp := splitSGLang(f)
			return `{"input_ids":[1,2,3]` + top + `,"sampling_params":{"max_new_tokens":2` + sp + `}}`
		}},
		DialectTRTLLM: {"/v1/completions", func(f string) string {
			return `{"model":"turbine-mock","prompt":[1,2,3],"max_tokens":2` + f + `}`
		}},
	}
	for _, tc := range []struct {
		dialect DialectName
		fields  string
		want    string // "" accepted; else a part of the 400's body
	}{
		{DialectVLLM, `,"top_k":20,"min_p":0.1,"repetition_penalty":1.2,"presence_penalty":1,"frequency_penalty":-1`, ""},
		{DialectVLLM, `,"top_k":-1`, ""},
		{DialectVLLM, `,"logit_bias":{"5":200,"6":-3}`, ""}, // clamped, as vLLM does
		{DialectVLLM, `,"bad_words":["a","b c"],"allowed_token_ids":[5,6],"priority":-3,"cache_salt":"x"`, ""},
		{DialectVLLM, `,"top_k":-2`, "top_k must be"},
		{DialectVLLM, `,"min_p":1.5`, "min_p must be in [0, 1]"},
		{DialectVLLM, `,"repetition_penalty":0`, "repetition_penalty must be greater than zero"},
		{DialectVLLM, `,"presence_penalty":3`, "presence_penalty must be in [-2, 2]"},
		{DialectVLLM, `,"logit_bias":{"99999999":1}`, "out-of-vocab"},
		{DialectVLLM, `,"logit_bias":{"x":1}`, "must be a valid integer token ID"},
		{DialectVLLM, `,"allowed_token_ids":[]`, "allowed_token_ids is not None and empty"},
		{DialectVLLM, `,"allowed_token_ids":[99999999]`, "out-of-vocab token id"},
		{DialectVLLM, `,"cache_salt":""`, "cache_salt"},
		{DialectSGLang, `,"top_k":20,"min_p":0.1,"repetition_penalty":2,"logit_bias":{"5":3}`, ""},
		{DialectSGLang, `,"priority":4,"cache_salt":"x"`, ""},
		{DialectSGLang, `,"repetition_penalty":2.5`, "repetition_penalty must be in (0, 2]"},
		{DialectSGLang, `,"bad_words":["a"]`, "unexpected keyword argument 'bad_words'"},
		{DialectSGLang, `,"allowed_token_ids":[5]`, "unexpected keyword argument 'allowed_token_ids'"},
		{DialectTRTLLM, `,"top_k":20,"min_p":0.1,"repetition_penalty":1.2,"logit_bias":{"5":3},"priority":0.9`, ""},
		{DialectTRTLLM, `,"logit_bias":{"5":101}`, "must be in [-100, 100]"},
		{DialectTRTLLM, `,"priority":3`, "priority"},
		{DialectTRTLLM, `,"bad_words":["a"]`, "Extra inputs are not permitted"},
		{DialectTRTLLM, `,"allowed_token_ids":[5]`, "Extra inputs are not permitted"},
		{DialectTRTLLM, `,"cache_salt":"x"`, "Extra inputs are not permitted"},
	} {
		o := testOptions(t)
		o.Dialect = tc.dialect
		_, hs := startServer(t, o)
		d := dialects[tc.dialect]
		body := d.wrap(tc.fields)
		resp, b := postJSON(t, hs.URL+d.path, body)
		switch {
		case tc.want == "" && resp.StatusCode != http.StatusOK:
			t.Errorf("%s %s: %d %s", tc.dialect, body, resp.StatusCode, b)
		case tc.want != "" && (resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want)):
			t.Errorf("%s %s: %d %s, want 400 with %q", tc.dialect, body, resp.StatusCode, b, tc.want)
		}
	}
}

// splitSGLang puts priority and cache_salt at the top level of a /generate body and the
// other fields in sampling_params.
func splitSGLang(fields string) (top, sampling string) {
	for _, f := range strings.Split(strings.TrimPrefix(fields, ","), `,"`) {
		if f == "" {
			continue
		}
		f = `"` + strings.TrimPrefix(f, `"`)
		if strings.HasPrefix(f, `"priority"`) || strings.HasPrefix(f, `"cache_salt"`) {
			top += "," + f
		} else {
			sampling += "," + f
		}
	}
	return top, sampling
}
