// Package helm_test checks Turbine's Helm chart (deploy/helm/turbine, docs/kubernetes.md):
// helm lint and helm template over the values files under testdata/, every rendered
// object decoded strictly into its Go type and created in client-go's fake clientset,
// and the cross-references between objects and the flags of the turbine subcommands.
package helm_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	chartDir  = "turbine"
	release   = "turbine"
	namespace = "inference"
	// kubeVersion is the cluster version rendered for (the chart needs 1.29+: native
	// sidecars). A helm built with go install reports v1.20 unless told.
	kubeVersion = "1.33.0"
)

// helmPath finds helm: $TURBINE_HELM, then PATH, then the cache scripts/ensure-tools.sh
// installs into; it skips the test when there is none.
func helmPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TURBINE_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	cache := os.Getenv("TURBINE_CACHE_DIR")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "turbine")
		}
	}
	if p := filepath.Join(cache, "bin", "helm"); cache != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("helm not found (TURBINE_HELM, PATH, ~/.cache/turbine/bin/helm): bash scripts/ensure-tools.sh installs it from the Go module proxy")
	return ""
}

// runHelm runs helm and returns its stdout; the error carries stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

func valuesArgs(files []string) []string {
	var args []string
	for _, f := range files {
		args = append(args, "-f", f)
	}
	return args
}

// render runs helm template with the values files and applies the result to a fake
// API server.
func render(t *testing.T, files ...string) *cluster {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, valuesArgs(files)...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(strings.NewReader(out))
	if err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	c, err := apply(context.Background(), m, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) kinds() map[string]int {
	n := map[string]int{
		"Deployment": len(c.deployments), "StatefulSet": len(c.statefulSets), "Service": len(c.services),
		"ServiceAccount": len(c.serviceAccounts), "Secret": len(c.secrets), "ConfigMap": len(c.configMaps),
		"PodDisruptionBudget": len(c.pdbs), "HorizontalPodAutoscaler": len(c.hpas), "Role": len(c.roles),
		"RoleBinding": len(c.roleBindings), "NetworkPolicy": len(c.networkPolicies),
		"ServiceMonitor": len(c.serviceMonitors), "InferencePool": len(c.inferencePools),
	}
	for k, v := range n {
		if v == 0 {
			delete(n, k)
		}
	}
	return n
}

// pod returns the pod template of the workload named name ("" if none).
func (c *cluster) pod(name string) *corev1.PodSpec {
	for _, w := range c.workloads() {
		if w.name == name {
			return &w.tmpl.Spec
		}
	}
	return nil
}

func (c *cluster) workload(name string) (workload, bool) {
	for _, w := range c.workloads() {
		if w.name == name {
			return w, true
		}
	}
	return workload{}, false
}

// container returns the named container (or init container) of workload name.
func (c *cluster) container(t *testing.T, name, ctr string) corev1.Container {
	t.Helper()
	p := c.pod(name)
	if p == nil {
		t.Fatalf("no workload %s", name)
	}
	for _, x := range allContainers(p) {
		if x.Name == ctr {
			return x
		}
	}
	t.Fatalf("workload %s has no container %s", name, ctr)
	return corev1.Container{}
}

func wantArgs(t *testing.T, ctr corev1.Container, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(ctr.Args, w) {
			t.Errorf("container %s: no argument %q in %q", ctr.Name, w, ctr.Args)
		}
	}
}

func noArgs(t *testing.T, ctr corev1.Container, flags ...string) {
	t.Helper()
	for _, f := range flags {
		if v, ok := flagValue(ctr.Args, f); ok {
			t.Errorf("container %s: --%s=%s, want none", ctr.Name, f, v)
		}
	}
}

func gpus(ctr corev1.Container) int64 {
	q := ctr.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]
	return q.Value()
}

func envFrom(ctr corev1.Container, name string) *corev1.EnvVar {
	for i := range ctr.Env {
		if ctr.Env[i].Name == name {
			return &ctr.Env[i]
		}
	}
	return nil
}

var chartCases = []struct {
	name     string
	values   []string
	kinds    map[string]int
	external []string // objects the values name but the chart does not render
	check    func(t *testing.T, c *cluster)
}{
	{
		name: "defaults", values: []string{"testdata/defaults.yaml"},
		kinds: map[string]int{"Deployment": 2, "StatefulSet": 1, "Service": 4, "ServiceAccount": 1, "PodDisruptionBudget": 2},
		check: func(t *testing.T, c *cluster) {
			fe := c.container(t, "turbine-frontend", "frontend")
			wantArgs(t, fe, "frontend", "--host=0.0.0.0", "--port=8000", "--discovery=consul://turbine-consul:8500", "--member-host=0.0.0.0", "--advertise-host=$(POD_IP)")
			noArgs(t, fe, "tls-cert", "otlp-endpoint", "admin-port")
			if envFrom(fe, "TURBINE_API_KEY") != nil {
				t.Error("frontend: TURBINE_API_KEY set without API keys")
			}
			node := c.container(t, "turbine-node-worker", "node")
			wantArgs(t, node, "node", "--engine=mocker", "--model=turbine-mock", "--worker-role=aggregated", "--workers=1", "--http-port=9090", "--drain-timeout=30s", "--node-id=$(POD_NAME)")
			if g := gpus(node); g != 0 {
				t.Errorf("mock node requests %d GPUs", g)
			}
			if w, _ := c.workload("turbine-node-worker"); w.kind != "Deployment" || w.replicas == nil || *w.replicas != 2 {
				t.Errorf("node pool: %s with replicas %v, want a Deployment of 2", w.kind, w.replicas)
			}
			if p := node.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
				t.Errorf("node readiness probe %+v, want GET /health", p)
			}
			if p := node.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/live" {
				t.Errorf("node liveness probe %+v, want GET /live", p)
			}
			if g := *c.pod("turbine-node-worker").TerminationGracePeriodSeconds; g != 50 {
				t.Errorf("node grace period %d s, want 30 s drain + 20 s", g)
			}
		},
	},
	{
		name: "vllm-1p2d", values: []string{"testdata/gpu-vllm-1p2d.yaml"},
		kinds:    map[string]int{"Deployment": 1, "StatefulSet": 3, "Service": 5, "ServiceAccount": 1, "PodDisruptionBudget": 3},
		external: []string{"PersistentVolumeClaim/models"},
		check: func(t *testing.T, c *cluster) {
			for name, replicas := range map[string]int32{"turbine-node-prefill": 1, "turbine-node-decode": 2} {
				w, ok := c.workload(name)
				if !ok || w.kind != "StatefulSet" || *w.replicas != replicas {
					t.Fatalf("%s: %+v, want a StatefulSet of %d", name, w, replicas)
				}
				node := c.container(t, name, "node")
				role := strings.TrimPrefix(name, "turbine-node-")
				wantArgs(t, node, "--engine=vllm", "--worker-role="+role, "--tensor-parallel-size=1", "--model=/models/Qwen3-8B",
					"--max-model-len=32768", "--ready-timeout=15m", "--block-size=16")
				if g := gpus(node); g != 1 {
					t.Errorf("%s: %d GPUs, want 1", name, g)
				}
				if node.Image != "registry.example.com/vllm-openai-turbine:v0.11.0" || node.Command[0] != "/usr/local/bin/turbine" {
					t.Errorf("%s: image %s command %q", name, node.Image, node.Command)
				}
				pod := c.pod(name)
				if !slices.ContainsFunc(pod.Tolerations, func(x corev1.Toleration) bool { return x.Key == "nvidia.com/gpu" }) {
					t.Errorf("%s: no toleration of the nvidia.com/gpu taint", name)
				}
				if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
					return v.Name == "dshm" && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory
				}) {
					t.Errorf("%s: no memory-backed /dev/shm", name)
				}
			}
			pre := c.container(t, "turbine-node-prefill", "node")
			if i := slices.Index(pre.Args, "--"); i < 0 || !slices.Equal(pre.Args[i+1:], []string{"--enforce-eager"}) {
				t.Errorf("prefill: engine arguments after --: %q", pre.Args)
			}
		},
	},
	{
		name: "everything", values: []string{"testdata/everything.yaml"},
		kinds: map[string]int{"Deployment": 4, "StatefulSet": 2, "Service": 6, "ServiceAccount": 3, "Secret": 2,
			"PodDisruptionBudget": 4, "HorizontalPodAutoscaler": 1, "Role": 2, "RoleBinding": 2, "NetworkPolicy": 4,
			"ServiceMonitor": 3, "InferencePool": 1},
		external: []string{"Secret/turbine-gateway-tls", "Secret/turbine-member-tls", "Secret/turbine-epp-tls"},
		check: func(t *testing.T, c *cluster) {
			fe := c.container(t, "turbine-frontend", "frontend")
			wantArgs(t, fe, "--tls-cert=/etc/turbine/gateway-tls/tls.crt", "--tls-key=/etc/turbine/gateway-tls/tls.key",
				"--member-tls-ca=/etc/turbine/member-tls/ca.crt", "--admin-port=8081",
				"--otlp-endpoint=http://otel-collector.observability:4318", "--trace-sample-ratio=0.25", "--queue-depth=64")
			if fe.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("frontend probes over %s, want HTTPS with TLS on", fe.ReadinessProbe.HTTPGet.Scheme)
			}
			for _, name := range []string{"TURBINE_API_KEY", "TURBINE_ADMIN_API_KEY", "TURBINE_CONSUL_TOKEN"} {
				if e := envFrom(fe, name); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("frontend: %s not from a Secret: %+v", name, e)
				}
			}
			pl := c.container(t, "turbine-planner", "planner")
			wantArgs(t, pl, "--connector=kubernetes", "--kube-namespace=inference", "--kube-aggregated=deployment/turbine-node-worker", "--gpu-budget=6")
			wantArgs(t, c.container(t, "turbine-node-worker", "node"), "--kvbm=true", "--kvbm-host-bytes=2GiB", "--kvbm-disk-bytes=20GiB")
			side := c.container(t, "turbine-node-cache", "kvbm")
			if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Error("kvbm sidecar: not a native sidecar (restartPolicy Always)")
			}
			wantArgs(t, side, "kvbm", "--node-id=$(POD_NAME)", "--member-port=7601")
			cache := c.container(t, "turbine-node-cache", "node")
			wantArgs(t, cache, "--kvbm-external=true", "--workers=2")
			noArgs(t, cache, "engine-host")
			wantArgs(t, c.container(t, "turbine-node-worker", "node"), "--engine-host=0.0.0.0")
			epp := c.container(t, "turbine-epp", "epp")
			wantArgs(t, epp, "epp", "--host=0.0.0.0", "--metrics-port=9090", "--grpc-port=9002", "--grpc-health-port=9003", "--pool-name=turbine", "--pool-namespace=inference", "--cert-path=/etc/turbine/epp-tls")
			ip := c.inferencePools[0]
			if sel := selectedBy(c.workloads(), ip.Spec.Selector.MatchLabels); len(sel) != 1 || sel[0].name != "turbine-node-worker" {
				t.Errorf("InferencePool selects %v, want the worker pool only (cache has inferencePool: false)", sel)
			}
			if r := ip.Spec.EndpointPickerRef; r == nil || r.Name != "turbine-epp" || r.FailureMode != "FailOpen" {
				t.Errorf("InferencePool endpointPickerRef %+v", r)
			}
			consul, _ := c.workload("turbine-consul")
			if *consul.replicas != 3 || !slices.Contains(consul.claims, "data") {
				t.Errorf("consul: %d replicas, claims %v", *consul.replicas, consul.claims)
			}
		},
	},
	{
		name: "existing-consul", values: []string{"testdata/existing-consul.yaml"},
		kinds:    map[string]int{"Deployment": 2, "Service": 2, "ServiceAccount": 1, "PodDisruptionBudget": 2},
		external: []string{"Secret/consul-turbine-token", "Secret/consul-client-tls", "Secret/turbine-api-keys"},
		check: func(t *testing.T, c *cluster) {
			for w, name := range map[string]string{"turbine-frontend": "frontend", "turbine-node-worker": "node"} {
				ctr := c.container(t, w, name)
				wantArgs(t, ctr, "--discovery=consul://$(HOST_IP):8501", "--consul-cacert=/etc/turbine/consul-tls/ca.crt",
					"--consul-client-cert=/etc/turbine/consul-tls/tls.crt", "--consul-tls-server-name=server.dc1.consul")
				if e := envFrom(ctr, "TURBINE_CONSUL_TOKEN"); e == nil || e.ValueFrom.SecretKeyRef.Name != "consul-turbine-token" {
					t.Errorf("%s: TURBINE_CONSUL_TOKEN %+v", w, e)
				}
			}
		},
	},
}

// TestChart lints and renders the chart with each values file, decodes every object
// strictly, creates them in a fake API server and checks what refers to what, and that
// every container runs turbine with flags its subcommand takes.
func TestChart(t *testing.T) {
	helmPath(t)
	if _, err := runHelm(t, "lint", chartDir, "--kube-version", kubeVersion); err != nil {
		t.Fatal(err)
	}
	pending := map[string]bool{}
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := runHelm(t, append([]string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}, valuesArgs(tc.values)...)...); err != nil {
				t.Fatal(err)
			}
			c := render(t, tc.values...)
			if got := c.kinds(); !mapsEqual(got, tc.kinds) {
				t.Errorf("objects by kind %v, want %v", got, tc.kinds)
			}
			ext := externals{}
			for _, e := range tc.external {
				ext[e] = true
			}
			for _, p := range checkRefs(c, ext) {
				t.Error(p)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
			sets := turbineFlags(t)
			if sets == nil {
				t.Log("-short: flags not checked (that builds the turbine binary)")
				return
			}
			for _, w := range c.workloads() {
				for _, ctr := range allContainers(&w.tmpl.Spec) {
					for _, p := range checkFlags(sets, w.kind+" "+w.name+" container "+ctr.Name, ctr, pending) {
						t.Error(p)
					}
				}
			}
		})
	}
	if len(pending) > 0 {
		t.Logf("flags accepted before their subcommand lists them: %s", strings.Join(sortedKeys(pending), ", "))
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestChartRejectsValues: values the chart cannot honour fail helm template with a
// message naming the key (testdata/invalid/*.yaml, each saying what it wants in a
// "# want: " line).
func TestChartRejectsValues(t *testing.T) {
	helmPath(t)
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/invalid/*.yaml")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			want := wantLine(t, f)
			_, err := runHelm(t, "template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion, "-f", f)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("helm template: %v, want an error containing %q", err, want)
			}
		})
	}
}

// wantLine reads the "# want: …" line of a fixture.
func wantLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if w, ok := strings.CutPrefix(line, "# want: "); ok {
			return w
		}
	}
	t.Fatalf("%s has no '# want: ' line", path)
	return ""
}

// TestChartTakesConfigureValues: the Kubernetes values `turbine configure --apply helm`
// writes (its golden file) size the pools of a GPU values file: replicas, tensor
// parallelism and GPUs per pod of each role.
func TestChartTakesConfigureValues(t *testing.T) {
	helmPath(t)
	golden, err := os.ReadFile(filepath.Join("..", "..", "cmd", "turbine", "configure", "testdata", "apply-helm.golden"))
	if err != nil {
		t.Fatal(err)
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(golden)))
	for i := 0; ; i++ {
		doc, err := docs.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var v struct {
			Model string
			Pools map[string]struct {
				Replicas           int32 `json:"replicas"`
				TensorParallelSize int   `json:"tensorParallelSize"`
				Resources          struct {
					Limits map[string]resource.Quantity `json:"limits"`
				} `json:"resources"`
			}
		}
		if err := utilyaml.Unmarshal(doc, &v); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprint("layout-", i), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "layout.yaml")
			if err := os.WriteFile(path, doc, 0o600); err != nil {
				t.Fatal(err)
			}
			base := "testdata/gpu-vllm-1p2d.yaml"
			if _, ok := v.Pools["aggregated"]; ok {
				base = "testdata/gpu-vllm-aggregated.yaml"
			}
			c := render(t, base, path)
			for _, p := range checkRefs(c, externals{"PersistentVolumeClaim/models": true}) {
				t.Error(p)
			}
			for role, want := range v.Pools {
				var found bool
				for _, w := range c.workloads() {
					if w.tmpl.Labels["turbine-llm.io/role"] != role {
						continue
					}
					found = true
					node := c.container(t, w.name, "node")
					wantArgs(t, node, fmt.Sprint("--tensor-parallel-size=", want.TensorParallelSize), "--model="+v.Model)
					g := want.Resources.Limits["nvidia.com/gpu"]
					if *w.replicas != want.Replicas || gpus(node) != g.Value() {
						t.Errorf("%s: %d replicas of %d GPUs, want %d of %d", w.name, *w.replicas, gpus(node), want.Replicas, g.Value())
					}
				}
				if !found {
					t.Errorf("no node pool of role %s", role)
				}
			}
		})
	}
}

// TestRefsCatchDefects: each manifest under testdata/defects/ has one defect, which
// decoding or checkRefs must report (its "# want: " line).
func TestRefsCatchDefects(t *testing.T) {
	files, _ := filepath.Glob("testdata/defects/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/defects/*.yaml")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			want := wantLine(t, f)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var problems []string
			m, err := decodeManifest(bytes.NewReader(b))
			if err == nil {
				var c *cluster
				if c, err = apply(context.Background(), m, namespace); err == nil {
					problems = checkRefs(c, externals{})
				}
			}
			if err != nil {
				problems = append(problems, err.Error())
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
				t.Fatalf("problems %q, want one containing %q", problems, want)
			}
		})
	}
}

// TestFlagsCatchUnknown: checkFlags reports a flag and a TURBINE_ variable the
// subcommand does not take, and accepts its real flags.
func TestFlagsCatchUnknown(t *testing.T) {
	sets := turbineFlags(t)
	if sets == nil {
		t.Skip("-short: the flag check builds the turbine binary")
	}
	ctr := corev1.Container{Name: "node", Command: []string{"/turbine"},
		Args: []string{"node", "--workers=1", "--no-such-flag=1", "--", "--engine-own-flag"},
		Env:  []corev1.EnvVar{{Name: "TURBINE_MAX_NUM_SEQS", Value: "8"}, {Name: "TURBINE_NO_SUCH", Value: "x"}, {Name: "TURBINE_CACHE_DIR", Value: "/c"}}}
	got := checkFlags(sets, "test", ctr, map[string]bool{})
	want := []string{"test: turbine node has no flag --no-such-flag", "test: env TURBINE_NO_SUCH is no flag of turbine node"}
	if !slices.Equal(got, want) {
		t.Fatalf("checkFlags: %q, want %q", got, want)
	}
	if errs := checkFlags(sets, "test", corev1.Container{Command: []string{"/turbine"}, Args: []string{"serve-all"}}, nil); len(errs) != 1 {
		t.Fatalf("unknown subcommand: %q", errs)
	}
}
