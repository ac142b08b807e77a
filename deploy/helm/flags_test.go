package helm_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// flagsPending are flags of issue 17 that are being added to the subcommands alongside
// the chart: each is accepted only while the subcommand's -h does not list it yet (the
// test logs those it relied on, so that the list can shrink to nothing). "*" is every
// cluster member.
var flagsPending = map[string][]string{
	"*":        {"member-tls-cert", "member-tls-key", "member-tls-ca"},
	"frontend": {"tls-cert", "tls-key", "admin-host", "admin-port", "otlp-endpoint", "otlp-insecure", "trace-sample-ratio"},
	"node":     {"http-host", "http-port", "otlp-endpoint", "otlp-insecure", "trace-sample-ratio"},
	"epp": {"grpc-port", "grpc-health-port", "pool-name", "pool-namespace", "secure-serving", "cert-path",
		"otlp-endpoint", "otlp-insecure", "trace-sample-ratio"},
}

// envNotFlags are TURBINE_ variables the binary reads that are no flag's.
var envNotFlags = map[string]bool{"TURBINE_CACHE_DIR": true}

var (
	flagsOnce sync.Once
	flagsSets map[string]map[string]bool // subcommand → its flags; nil: no such subcommand
	flagsErr  error
)

// flagLine is a flag in the output of `turbine <command> -h` (Go's flag package).
var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)

// turbineFlags builds the turbine binary once ($TURBINE_BIN when set) and reads each
// subcommand's flags from its -h; nil under -short (no build).
func turbineFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	if testing.Short() {
		return nil
	}
	flagsOnce.Do(func() {
		bin := os.Getenv("TURBINE_BIN")
		if bin == "" {
			dir, err := os.MkdirTemp("", "turbine-helm-")
			if err != nil {
				flagsErr = err
				return
			}
			// The directory stays until the process ends: every test of the package uses it.
			bin = filepath.Join(dir, "turbine")
			build := exec.Command("go", "build", "-o", bin, "./cmd/turbine")
			build.Dir = filepath.Join("..", "..")
			if out, err := build.CombinedOutput(); err != nil {
				flagsErr = fmt.Errorf("go build ./cmd/turbine: %v\n%s", err, out)
				return
			}
		}
		flagsSets = map[string]map[string]bool{}
		for _, cmd := range []string{"frontend", "node", "kvbm", "planner", "epp"} {
			out, _ := exec.Command(bin, cmd, "-h").CombinedOutput()
			if strings.Contains(string(out), "unknown command") {
				flagsSets[cmd] = nil
				continue
			}
			set := map[string]bool{}
			for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
				set[m[1]] = true
			}
			if len(set) == 0 {
				flagsErr = fmt.Errorf("turbine %s -h lists no flag:\n%s", cmd, out)
				return
			}
			flagsSets[cmd] = set
		}
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagsSets
}

// clusterFlags are the flags every member has (those of options.Cluster): the flags
// common to frontend, node, kvbm and planner.
func clusterFlags(sets map[string]map[string]bool) map[string]bool {
	out := map[string]bool{}
	for f := range sets["frontend"] {
		if sets["node"][f] && sets["kvbm"][f] && sets["planner"][f] {
			out[f] = true
		}
	}
	return out
}

// checkFlags returns every --flag and TURBINE_ variable of a turbine container that its
// subcommand does not take, and records the pending flags it accepted in pending.
func checkFlags(sets map[string]map[string]bool, what string, ctr corev1.Container, pending map[string]bool) []string {
	if len(ctr.Command) == 0 || filepath.Base(ctr.Command[len(ctr.Command)-1]) != "turbine" || len(ctr.Args) == 0 {
		return nil
	}
	cmd := ctr.Args[0]
	known, ok := sets[cmd]
	if !ok {
		return []string{fmt.Sprintf("%s: turbine %s is not a subcommand the chart may run", what, cmd)}
	}
	if known == nil { // not merged yet: the cluster flags and the pending ones
		known = clusterFlags(sets)
	}
	allowed := func(flag string) bool {
		if known[flag] {
			return true
		}
		for _, key := range []string{cmd, "*"} {
			for _, p := range flagsPending[key] {
				if p == flag {
					pending[cmd+" --"+flag] = true
					return true
				}
			}
		}
		return false
	}
	var bad []string
	for _, a := range ctr.Args[1:] {
		if a == "--" {
			break // the engines' own arguments
		}
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: argument %q of turbine %s is not a --flag", what, a, cmd))
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !allowed(name) {
			bad = append(bad, fmt.Sprintf("%s: turbine %s has no flag --%s", what, cmd, name))
		}
	}
	for _, e := range ctr.Env {
		rest, ok := strings.CutPrefix(e.Name, "TURBINE_")
		if !ok || envNotFlags[e.Name] {
			continue
		}
		if flag := strings.ReplaceAll(strings.ToLower(rest), "_", "-"); !allowed(flag) {
			bad = append(bad, fmt.Sprintf("%s: env %s is no flag of turbine %s", what, e.Name, cmd))
		}
	}
	return bad
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
