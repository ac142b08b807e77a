package enginehttp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStopReason(t *testing.T) {
	cases := []struct {
		raw     string
		id      uint32
		isID    bool
		str     string
		wantErr bool
	}{
		{"", 0, false, "", false},
		{"null", 0, false, "", false},
		{"7", 7, true, "", false},
		{"4294967295", 4294967295, true, "", false},
		{`"END"`, 0, false, "END", false},
		{"4294967296", 0, false, "", true},
		{"-1", 0, false, "", true},
		{"1.5", 0, false, "", true},
		{"[1]", 0, false, "", true},
	}
	for _, tc := range cases {
		id, isID, str, err := StopReason(json.RawMessage(tc.raw))
		if (err != nil) != tc.wantErr || id != tc.id || isID != tc.isID || str != tc.str {
			t.Errorf("%q: %d %v %q %v", tc.raw, id, isID, str, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "stop_reason "+tc.raw) {
			t.Errorf("%q: error %v", tc.raw, err)
		}
	}
}

func TestUsageCachedTokens(t *testing.T) {
	var u Usage
	if err := json.Unmarshal([]byte(`{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`), &u); err != nil || u.CachedTokens() != 0 {
		t.Fatalf("%+v %v", u, err)
	}
	if err := json.Unmarshal([]byte(`{"prompt_tokens_details":{"cached_tokens":2}}`), &u); err != nil || u.CachedTokens() != 2 {
		t.Fatalf("%+v %v", u, err)
	}
}
