package cluster

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/consul/api"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected results in testdata scripts")

// TestMemberViewScripts runs the scripts in testdata/membership. Each line is a command;
// an observation's expected result follows "=>" on the same line (-rewrite fills it in):
//
//	self ID                      the member itself (omit for a client)
//	window DURATION              the recovery window (before any observe)
//	distrust AT                  a sign of a Consul outage at time AT (e.g. 2.5s)
//	observe AT [ID...] => [ID...] changed|same
//	                             Consul answers at AT with these passing members; the
//	                             list published and whether it changed
//	recovering AT => true|false  whether absences are untrusted at AT
func TestMemberViewScripts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "membership", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/membership")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runViewScript(t, file) })
	}
}

func runViewScript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	at := func(lineNo int, s string) time.Time {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s:%d: time %q: %v", file, lineNo, s, err)
		}
		return t0.Add(d)
	}
	var self *pcluster.Member
	window := 10 * time.Second
	var v *memberView
	view := func() *memberView {
		if v == nil {
			v = newMemberView(self, window)
		}
		return v
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		cmd, want, hasWant := strings.Cut(line, "=>")
		f := strings.Fields(cmd)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			out = append(out, line)
			continue
		}
		var got string
		switch {
		case f[0] == "self" && len(f) == 2:
			self = member(f[1])
		case f[0] == "window" && len(f) == 2:
			if window, err = time.ParseDuration(f[1]); err != nil {
				t.Fatalf("%s:%d: %v", file, n, err)
			}
		case f[0] == "distrust" && len(f) == 2:
			view().distrust(at(n, f[1]))
		case f[0] == "observe" && len(f) >= 2:
			var passing []*pcluster.Member
			for _, id := range f[2:] {
				passing = append(passing, member(id))
			}
			members, changed := view().observe(at(n, f[1]), passing)
			got = idsOf(members) + map[bool]string{true: " changed", false: " same"}[changed]
		case f[0] == "recovering" && len(f) == 2:
			got = fmt.Sprint(view().recovering(at(n, f[1])))
		default:
			t.Fatalf("%s:%d: unknown command %q", file, n, line)
		}
		if got == "" {
			out = append(out, line)
			continue
		}
		out = append(out, strings.TrimRight(cmd, " ")+" => "+got)
		if !*rewrite && (!hasWant || strings.TrimSpace(want) != got) {
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, n, strings.TrimSpace(cmd), got, strings.TrimSpace(want))
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func member(id string) *pcluster.Member {
	return &pcluster.Member{Id: id, Host: "127.0.0.1", Port: 1000, Kinds: []string{"Router"}}
}

func idsOf(ms []*pcluster.Member) string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.Id
	}
	return "[" + strings.Join(ids, " ") + "]"
}

func TestPassingMembers(t *testing.T) {
	check := func(status string) api.HealthChecks {
		return api.HealthChecks{{Status: api.HealthPassing}, {Status: status}}
	}
	entries := []*api.ServiceEntry{
		{Service: &api.AgentService{ID: "a", Address: "10.0.0.1", Port: 7001, Tags: []string{"Router", "Catalog"},
			Meta: map[string]string{"id": "member-a"}}, Checks: check(api.HealthPassing)},
		{Service: &api.AgentService{ID: "b", Address: "10.0.0.2", Port: 7002, Meta: map[string]string{"id": "member-b"}},
			Checks: check(api.HealthCritical)},
		{Service: &api.AgentService{ID: "c", Address: "10.0.0.3", Port: 7003, Meta: map[string]string{"id": "member-c"}},
			Checks: check(api.HealthWarning)},
		{Service: &api.AgentService{ID: "d", Address: "10.0.0.4", Port: 7004}, Checks: check(api.HealthPassing)},
		{Service: &api.AgentService{ID: "e", Address: "10.0.0.5", Port: 7005, Meta: map[string]string{"id": "member-e"}}},
		{Checks: check(api.HealthPassing)},
	}
	got := passingMembers("turbine", entries)
	want := []*pcluster.Member{
		{Id: "member-a", Host: "10.0.0.1", Port: 7001, Kinds: []string{"Router", "Catalog"}},
		{Id: "turbine@10.0.0.4:7004", Host: "10.0.0.4", Port: 7004},
	}
	if !slices.EqualFunc(got, want, func(a, b *pcluster.Member) bool {
		return a.Id == b.Id && a.Host == b.Host && a.Port == b.Port && slices.Equal(a.Kinds, b.Kinds)
	}) {
		t.Fatalf("passingMembers = %v, want %v", got, want)
	}
}
