package bench

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestSummaryFaults: a simulation's kills, migrations and prefill retries round-trip
// through summary.json; a run without them writes none of these fields; ReadSummary
// refuses a negative count or time.
func TestSummaryFaults(t *testing.T) {
	s := Summarize(Outcome{})
	var buf bytes.Buffer
	if err := WriteSummary(&buf, s); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"kills", "migrations", "prefill_retries"} {
		if strings.Contains(buf.String(), `"`+field+`"`) {
			t.Errorf("a run without faults writes %s:\n%s", field, buf.String())
		}
	}
	s.Kills = []Kill{{Worker: "worker-1", AtS: 3600}, {Worker: "worker-0", AtS: 1.5, Killed: true}}
	s.Migrations = map[string]int{"worker_terminated": 3}
	s.PrefillRetries = map[string]int{"kv_transfer": 1, "worker_terminated": 2}
	buf.Reset()
	if err := WriteSummary(&buf, s); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSummary(&buf, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Kills, s.Kills) || !reflect.DeepEqual(back.Migrations, s.Migrations) || !reflect.DeepEqual(back.PrefillRetries, s.PrefillRetries) {
		t.Errorf("read back kills %+v, migrations %v, prefill retries %v: want %+v, %v, %v", back.Kills, back.Migrations, back.PrefillRetries,
			s.Kills, s.Migrations, s.PrefillRetries)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"requests": 0, "migrations": {"worker_terminated": -1}}`, `migrations["worker_terminated"] = -1`},
		{`{"requests": 0, "prefill_retries": {"a\u0001": 1}}`, `prefill_retries["a\x01"] = 1`},
		{`{"requests": 0, "kills": [{"worker": "worker-0", "at_s": -1, "killed": true}]}`, `kills[0]: worker "worker-0" at -1 s`},
	} {
		if _, err := ReadSummary(strings.NewReader(tc.json), "s.json"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.json, err, tc.want)
		}
	}
}
