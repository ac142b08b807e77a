package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestCatalogueGolden writes every catalogue entry as the client would see it (status,
// Retry-After, body) and compares with testdata/errors.golden.
func TestCatalogueGolden(t *testing.T) {
	var out strings.Builder
	seenName := map[string]bool{}
	for i, ent := range Catalogue() {
		if int(ent.Kind) != i {
			t.Fatalf("catalogue row %d holds kind %d: rows must be in ErrorKind order", i, ent.Kind)
		}
		if seenName[ent.Name] {
			t.Errorf("duplicate catalogue name %q", ent.Name)
		}
		seenName[ent.Name] = true
		if ent.Status < 400 || ent.Type == "" || ent.Code == "" {
			t.Errorf("incomplete catalogue row %+v", ent)
		}
		if (ent.Status >= 500) != (ent.Type == "server_error") {
			t.Errorf("row %s: status %d with type %q: 5xx must be server_error, others invalid_request_error", ent.Name, ent.Status, ent.Type)
		}
		e := &APIError{Kind: ent.Kind, Message: "example message", Param: "example_param"}
		rr := httptest.NewRecorder()
		writeError(rr, e, 2*time.Second)
		var body map[string]map[string]any
		if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body is not JSON: %v", ent.Name, err)
		}
		if rr.Code != ent.Status || body["error"]["code"] != ent.Code || body["error"]["type"] != ent.Type {
			t.Errorf("%s: got %d %v", ent.Name, rr.Code, body)
		}
		fmt.Fprintf(&out, "%-24s %d Retry-After=%q %s", ent.Name, rr.Code, rr.Header().Get("Retry-After"), rr.Body.String())
	}
	checkGolden(t, "errors.golden", []byte(out.String()))
}

func TestErrorParamNullWhenEmpty(t *testing.T) {
	rr := httptest.NewRecorder()
	writeError(rr, &APIError{Kind: KindInternal, Message: "m"}, 0)
	want := `{"error":{"message":"m","type":"server_error","param":null,"code":"internal_error"}}` + "\n"
	if rr.Body.String() != want {
		t.Errorf("got %s want %s", rr.Body.String(), want)
	}
}

func TestBackendErrorMapping(t *testing.T) {
	cases := []struct {
		err  error
		want ErrorKind
	}{
		{fmt.Errorf("router: %w", ErrUnknownModel), KindModelNotFound},
		{fmt.Errorf("router: %w", ErrNoWorkers), KindNoWorkers},
		{fmt.Errorf("router: 3 workers: %w", ErrAllBusy), KindAllBusy},
		{errors.New("remote: connection refused"), KindBackendError},
		{&APIError{Kind: KindEngineError, Message: "x"}, KindEngineError},
	}
	for _, c := range cases {
		got := backendError("m", c.err)
		if got.Kind != c.want {
			t.Errorf("%v: got %s want %s", c.err, got.Kind, c.want)
		}
		if got.Kind != KindEngineError && !errors.Is(got, c.err) {
			t.Errorf("%v: cause not kept", c.err)
		}
	}
}

func TestRetryAfterOnlyOn503(t *testing.T) {
	for _, ent := range Catalogue() {
		if ent.RetryAfter != (ent.Status == http.StatusServiceUnavailable) {
			t.Errorf("%s: RetryAfter=%v with status %d", ent.Name, ent.RetryAfter, ent.Status)
		}
	}
}
