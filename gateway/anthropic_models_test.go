package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAnthropicModelsPage pages a list of five models as Anthropic's Models API does.
func TestAnthropicModelsPage(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name, limit, after, before string
		want                       string // the ids, then has_more
		param                      string // the error's param, "" for none
	}{
		{"all", "", "", "", "a,b,c,d,e false", ""},
		{"first two", "2", "", "", "a,b true", ""},
		{"two after b", "2", "b", "", "c,d true", ""},
		{"the last two", "2", "c", "", "d,e false", ""},
		{"after the last", "", "e", "", " false", ""},
		{"two before d", "2", "", "d", "b,c true", ""},
		{"before c, room for all", "10", "", "c", "a,b false", ""},
		{"limit 0", "0", "", "", "", "limit"},
		{"limit over the bound", "1001", "", "", "", "limit"},
		{"limit not a number", "x", "", "", "", "limit"},
		{"both ids", "", "a", "c", "", "after_id"},
		{"unknown after_id", "", "z", "", "", "after_id"},
		{"unknown before_id", "", "", "z", "", "before_id"},
	} {
		page, aerr := anthropicModelsPage(ids, tc.limit, tc.after, tc.before, testTime)
		if tc.param != "" {
			if aerr == nil || aerr.Param != tc.param || aerr.Kind != KindInvalidValue {
				t.Errorf("%s: %v, want an invalid %s", tc.name, aerr, tc.param)
			}
			continue
		}
		if aerr != nil {
			t.Errorf("%s: %v", tc.name, aerr)
			continue
		}
		var got []string
		for _, m := range page.Data {
			got = append(got, m.ID)
		}
		if s := strings.Join(got, ",") + " " + map[bool]string{true: "true", false: "false"}[page.HasMore]; s != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.want)
		}
		if n := len(got); n > 0 && (page.FirstID == nil || *page.FirstID != got[0] || page.LastID == nil || *page.LastID != got[n-1]) ||
			n == 0 && (page.FirstID != nil || page.LastID != nil) {
			t.Errorf("%s: first_id %v, last_id %v", tc.name, page.FirstID, page.LastID)
		}
	}
}

// TestModelsForAnthropicClients: with an anthropic-version header, /v1/models and
// /v1/models/{id} answer in Anthropic's shape, errors included; without it, OpenAI's.
func TestModelsForAnthropicClients(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	for _, tc := range []struct {
		path    string
		anth    bool
		code    int
		want    string
		notWant string
	}{
		{"/v1/models", true, 200, `"data":[{"type":"model","id":"tiny","display_name":"tiny","created_at":"`, `"object"`},
		{"/v1/models?limit=1", true, 200, `"has_more":true,"first_id":"tiny","last_id":"tiny"`, ""},
		{"/v1/models?limit=0", true, 400, `{"type":"error","error":{"type":"invalid_request_error"`, ""},
		{"/v1/models/tiny", true, 200, `{"type":"model","id":"tiny"`, `"object"`},
		{"/v1/models/nope", true, 404, `{"type":"error","error":{"type":"not_found_error"`, ""},
		{"/v1/models", false, 200, `"object":"list"`, `"display_name"`},
		{"/v1/models/nope", false, 404, `"code":"model_not_found"`, ""},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.anth {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		rr := httptest.NewRecorder()
		s.ServeHTTP(rr, req)
		body := rr.Body.String()
		if rr.Code != tc.code || !strings.Contains(body, tc.want) || tc.notWant != "" && strings.Contains(body, tc.notWant) {
			t.Errorf("GET %s (anthropic %v): %d %s, want %d with %s", tc.path, tc.anth, rr.Code, body, tc.code, tc.want)
		}
	}
}
