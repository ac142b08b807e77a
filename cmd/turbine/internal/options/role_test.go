package options

import (
	"strings"
	"testing"
)

// TestParseWorkerRole: --worker-role's value comes back as the role's label, the
// spelling the worker registers and the metrics print ("" is aggregated).
func TestParseWorkerRole(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "aggregated", ""},
		{"aggregated", "aggregated", ""},
		{"prefill", "prefill", ""},
		{"decode", "decode", ""},
		{"both", "", `--worker-role "both": want aggregated, prefill or decode`},
		{"ROLE_PREFILL", "", `--worker-role "ROLE_PREFILL"`},
	} {
		got, err := ParseWorkerRole("--worker-role", tc.in)
		if got != tc.want || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseWorkerRole(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
