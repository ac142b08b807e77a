package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// TestRouteError: every route outcome but ROUTE_OK reaches the client as one catalogue
// entry, through backendError as Backend errors do, keeping the router's reason in the
// error; a request the router refuses as malformed is the client's fault (400), not an
// outage to retry (503).
func TestRouteError(t *testing.T) {
	cases := []struct {
		outcome messages.RouteOutcome
		kind    ErrorKind
		status  int
		is      error // wrapped sentinel; nil: none
	}{
		{messages.RouteOutcome_ROUTE_NO_WORKERS, KindNoWorkers, 503, ErrNoWorkers},
		{messages.RouteOutcome_ROUTE_ALL_BUSY, KindAllBusy, 503, ErrAllBusy},
		{messages.RouteOutcome_ROUTE_UNKNOWN_MODEL, KindModelNotFound, 404, ErrUnknownModel},
		{messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS, KindNoWorkers, 503, ErrNoPrefillWorkers},
		{messages.RouteOutcome_ROUTE_CALL_FAILED, KindNoWorkers, 503, ErrNoWorkers},
		{messages.RouteOutcome_ROUTE_BAD_REQUEST, KindInvalidValue, 400, nil},
		{messages.RouteOutcome_ROUTE_NO_ADAPTER, KindModelNotFound, 404, ErrUnknownModel},
	}
	seen := map[messages.RouteOutcome]bool{messages.RouteOutcome_ROUTE_OK: true}
	for _, c := range cases {
		seen[c.outcome] = true
		t.Run(c.outcome.Label(), func(t *testing.T) {
			err := RouteError(c.outcome, "the router's reason")
			if err == nil {
				t.Fatal("no error")
			}
			text := err.Error()
			var apiErr *APIError
			if errors.As(err, &apiErr) && apiErr.Cause != nil {
				text += " | " + apiErr.Cause.Error() // the log's
			}
			if !strings.Contains(text, "the router's reason") {
				t.Errorf("error %q does not keep the router's reason", text)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v does not wrap %v", err, c.is)
			}
			ae := backendError("m", err)
			if ae.Kind != c.kind || ae.Status() != c.status || ae.Kind.Entry().RetryAfter != (c.status == 503) {
				t.Errorf("answered %s %d (Retry-After %v), want %s %d", ae.Kind, ae.Status(), ae.Kind.Entry().RetryAfter, c.kind, c.status)
			}
		})
	}
	for v, name := range messages.RouteOutcome_name {
		if !seen[messages.RouteOutcome(v)] {
			t.Errorf("outcome %s has no row in this table", name)
		}
	}
	if err := RouteError(messages.RouteOutcome_ROUTE_OK, ""); err != nil {
		t.Errorf("ROUTE_OK: %v, want nil", err)
	}
}
