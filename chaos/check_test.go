package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker's rules, one case each (testdata/classify.json).
func TestClassify(t *testing.T) {
	b, err := os.ReadFile("testdata/classify.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string
		Rec    Record
		Ref    []uint32
		Events []Event
		Want   string
		Why    string
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		got, why := Classify(c.Rec, c.Ref, c.Events, DefaultWindows)
		if got.String() != c.Want || !strings.Contains(why, c.Why) {
			t.Errorf("%s: %s (%q), want %s (%q)", c.Name, got, why, c.Want, c.Why)
		}
	}
}

func TestCheckVerdict(t *testing.T) {
	recs := []Record{
		{ID: 0, Status: 200, Tokens: []uint32{1, 2}, Finish: "length", Done: true},
		{ID: 1, Status: 503, ErrCode: "no_live_workers", Start: time.Second, End: time.Second},
		{ID: 2, Status: 200, Tokens: []uint32{1}, Finish: "length", Done: true},
		{ID: 3, Status: 200, Tokens: []uint32{1, 2}, Finish: "length", Done: true}, // no reference
	}
	refs := map[int][]uint32{0: {1, 2}, 1: nil, 2: {1, 2}}
	after := After{
		Held:   map[string]float64{"fe-1 turbine_router_worker_active_requests w-0": 2, "n-1 vllm:num_requests_running": 0},
		Growth: map[string][2]float64{"fe-1 go_goroutines": {100, 250}, "n-1 go_goroutines": {100, 400}, "n-1 process_open_fds": {30, 60}},
	}
	events := []Event{{At: 0, For: 2 * time.Second, Kind: KillNode, Target: "n-1"}}
	v := Check(recs, refs, events, DefaultWindows, 3, after, Bound{Slack: 200, Factor: 1.5})
	if got, want := v.Line(), "requests 4, ok 1, failed 1, lost 2, duplicated 0, leaked 3"; got != want {
		t.Errorf("line %q, want %q\n%s", got, want, strings.Join(v.Problems, "\n"))
	}
	if v.Pass() || v.ByKind["no_live_workers"] != 1 {
		t.Errorf("verdict %+v", v)
	}
	clean := Check(recs[:2], refs, events, DefaultWindows, 3, After{}, Bound{})
	if !clean.Pass() {
		t.Errorf("clean run fails: %v", clean.Problems)
	}
	if !strings.Contains(clean.Detail(), "no_live_workers 1") {
		t.Errorf("detail %q", clean.Detail())
	}
	unconverged := Check(recs[:1], refs, nil, DefaultWindows, 3, After{Members: []string{"fe-1 lists 3 ready workers"}}, Bound{})
	if unconverged.Pass() {
		t.Error("a membership that did not converge passes")
	}
	drifted := Check(recs[:1], refs, nil, DefaultWindows, 3, After{Index: []string{"n-1-0: router 12 blocks, engine 10"}}, Bound{})
	if drifted.Pass() || !slices.Contains(drifted.Problems, "index: n-1-0: router 12 blocks, engine 10") {
		t.Errorf("an index that drifted: %v", drifted.Problems)
	}
}

// Partitions compose: a pair stays cut while any event cuts it; the rules name hosts.
func TestRules(t *testing.T) {
	split := Event{Kind: Split, Target: "halves"}
	iso := Event{Kind: IsolateNode, Target: "n-3"}
	one := Event{Kind: DropOneWay, Target: "fe-1", Peer: "consul"}
	lossy := Event{Kind: Lossy, Target: "n-1"}
	got := Rules([]Event{split, iso, one, lossy}, testTopo)
	want := map[string]string{
		"consul": "fe-2 n-3 n-4",
		"fe-1":   "consul fe-2 n-3 n-4",
		"fe-2":   "consul fe-1 n-1 n-2 n-3",
		"n-1":    "fe-2 n-3 n-4 lossy",
		"n-2":    "fe-2 n-3 n-4",
		"n-3":    "consul fe-1 fe-2 n-1 n-2",
		"n-4":    "consul fe-1 n-1 n-2",
	}
	for _, h := range testTopo.Hosts() {
		r := got[h]
		s := strings.Join(r.DropTo, " ")
		if r.Lossy {
			s += " lossy"
		}
		if s != want[h] {
			t.Errorf("%s: %q, want %q", h, s, want[h])
		}
	}
	if len(Rules(nil, testTopo)) != 0 {
		t.Error("rules without events")
	}
	// Consul reachable from both halves: the halves cut apart, Consul from nobody.
	keep := Rules([]Event{{Kind: SplitKeepConsul, Target: "halves"}}, testTopo)
	wantKeep := map[string]string{
		"consul": "",
		"fe-1":   "fe-2 n-3 n-4",
		"fe-2":   "fe-1 n-1 n-2",
		"n-1":    "fe-2 n-3 n-4",
		"n-2":    "fe-2 n-3 n-4",
		"n-3":    "fe-1 n-1 n-2",
		"n-4":    "fe-1 n-1 n-2",
	}
	for _, h := range testTopo.Hosts() {
		if s := strings.Join(keep[h].DropTo, " "); s != wantKeep[h] {
			t.Errorf("split-keep-consul, %s: %q, want %q", h, s, wantKeep[h])
		}
	}
	addr := map[string]string{"consul": "198.18.0.10", "fe-2": "198.18.0.12", "n-3": "198.18.0.15", "n-4": "198.18.0.16"}
	rs, err := Ruleset(got["fe-1"], addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"delete table ip turbine_chaos", "ip daddr 198.18.0.10 drop", "ip daddr 198.18.0.16 drop"} {
		if !strings.Contains(rs, line) {
			t.Errorf("ruleset lacks %q:\n%s", line, rs)
		}
	}
	if strings.Contains(rs, "numgen") {
		t.Error("a link that is not lossy loses packets")
	}
	if rs, _ := Ruleset(got["n-1"], map[string]string{"fe-2": "a", "n-3": "b", "n-4": "c"}); !strings.Contains(rs, "numgen random mod 100 < 5 drop") {
		t.Errorf("lossy ruleset:\n%s", rs)
	}
	if _, err := Ruleset(got["fe-1"], nil); err == nil {
		t.Error("a host without an address: no error")
	}
}

// Migrations are counted per request from the frontends' logs (every line, and the highest
// number logged), and a request past the limit fails the run.
func TestMigrationLimit(t *testing.T) {
	var logs []io.Reader
	for _, f := range []string{"fe-1.log", "fe-2.log"} {
		b, err := os.ReadFile(filepath.Join("testdata", "migrations", f))
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, bytes.NewReader(b))
	}
	got, err := Migrations(logs...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"chaos-7": 1, "chaos-9": 2, "chaos-8": 4, "chaos-10": 4}
	if !maps.Equal(got, want) {
		t.Fatalf("migrations %v, want %v", got, want)
	}
	var recs []Record
	refs := map[int][]uint32{}
	for id := 7; id <= 11; id++ {
		recs = append(recs, Record{ID: id, Status: 200, Tokens: []uint32{1}, Finish: "length", Done: true, Migrations: got[RequestID(id)]})
		refs[id] = []uint32{1}
	}
	v := Check(recs, refs, nil, DefaultWindows, 3, After{}, Bound{})
	if v.Pass() || v.Retried != 2 || v.Migrations != 11 || v.MostMigrations != 4 {
		t.Errorf("verdict %+v", v)
	}
	for _, p := range []string{"migration: request 8 migrated 4 times, past the limit of 3", "migration: request 10 migrated 4 times, past the limit of 3"} {
		if !slices.Contains(v.Problems, p) {
			t.Errorf("no problem %q in %v", p, v.Problems)
		}
	}
	if !strings.Contains(v.Detail(), "migrations 11 (at most 4 for one request, 2 past the limit)") {
		t.Errorf("detail %q", v.Detail())
	}
	if ok := Check(recs, refs, nil, DefaultWindows, 4, After{}, Bound{}); !ok.Pass() {
		t.Errorf("within a limit of 4: %v", ok.Problems)
	}
}
