package kubeserver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

const token = "turbine-apiserver-test-token"

// kubeBin is where scripts/ensure-kube.sh leaves etcd and kube-apiserver.
func kubeBin() string {
	if d := os.Getenv("TURBINE_KUBE_DIR"); d != "" {
		return filepath.Join(d, "bin")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "turbine", "kube", "bin")
}

func helmPath() (string, bool) {
	if p, err := exec.LookPath("helm"); err == nil {
		return p, true
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "turbine", "bin", "helm")
	if _, err := os.Stat(p); err == nil {
		return p, true
	}
	return "", false
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs a process until the test ends; its output goes to a file shown on failure.
// The channel is closed when the process exits.
func start(t *testing.T, dir, name string, args ...string) <-chan struct{} {
	t.Helper()
	logPath := filepath.Join(dir, filepath.Base(name)+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s output (tail):\n%s", filepath.Base(name), b)
		}
	})
	return exited
}

// startAPIServer starts etcd and kube-apiserver on loopback and returns a client
// configuration holding a system:masters token.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	bin := kubeBin()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("%s not built (run scripts/ensure-kube.sh): %v", b, err)
		}
	}
	dir := t.TempDir()
	clientPort, peerPort := freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	start(t, dir, filepath.Join(bin, "etcd"),
		"--data-dir", filepath.Join(dir, "etcd"), "--name", "default",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenPath := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenPath, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	apiExited := start(t, dir, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port), "--cert-dir", filepath.Join(dir, "certs"),
		"--service-cluster-ip-range", "10.0.0.0/24", "--allow-privileged=true",
		"--authorization-mode", "RBAC", "--token-auth-file", tokenPath,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", keyPath, "--service-account-signing-key-file", keyPath,
		"--disable-admission-plugins", "ServiceAccount",
		// No controller manager runs: the server need not keep a kubernetes Service's
		// endpoints (which refuses a loopback address).
		"--endpoint-reconciler-type", "none")

	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", port), BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cfg
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 90 s (last: %v)", err)
		}
		select {
		case <-apiExited:
			t.Fatal("kube-apiserver exited before it was ready")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// crdFor returns a CustomResourceDefinition that accepts any object of the group and
// kind: the chart's custom resources (ServiceMonitor, InferencePool) are checked for
// shape by the chart's own tests; here the server checks their metadata and stores them.
func crdFor(gvk schema.GroupVersionKind, plural string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		// *.k8s.io groups need the approval annotation; the real CRDs carry their
		// KEP's, this stand-in says it has none.
		"metadata": map[string]any{"name": plural + "." + gvk.Group,
			"annotations": map[string]any{"api-approved.kubernetes.io": "unapproved, a stand-in for the published CRD"}},
		"spec": map[string]any{
			"group": gvk.Group,
			"scope": "Namespaced",
			"names": map[string]any{"kind": gvk.Kind, "plural": plural, "singular": strings.ToLower(gvk.Kind), "listKind": gvk.Kind + "List"},
			"versions": []any{map[string]any{
				"name": gvk.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// render runs `helm template` on the chart with one values file.
func render(t *testing.T, helm, chart, namespace, values string) []*unstructured.Unstructured {
	t.Helper()
	// The server's version: a helm built with `go install` reports an old default one.
	args := []string{"template", "turbine", chart, "--namespace", namespace, "--kube-version", "1.37.2"}
	args = append(args, "-f", values)
	var out, errb bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode rendered chart: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// TestChartObjectsOnAPIServer creates every object the chart renders, for each values file
// of deploy/helm/testdata, on a real kube-apiserver with strict field validation: an
// unknown or misplaced field, a bad reference between RBAC objects or an invalid value
// fails the create.
func TestChartObjectsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	helm, ok := helmPath()
	if !ok {
		t.Skip("helm not installed (scripts/ensure-tools.sh builds it)")
	}
	chart, err := filepath.Abs("../helm/turbine")
	if err != nil {
		t.Fatal(err)
	}
	valueFiles, _ := filepath.Glob("../helm/testdata/*.yaml")
	sort.Strings(valueFiles)
	if len(valueFiles) == 0 {
		t.Fatal("no values files in deploy/helm/testdata")
	}

	cfg := startAPIServer(t)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cached := memory.NewMemCacheClient(disc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	crds := map[schema.GroupVersionKind]string{
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}:                   "servicemonitors",
		{Group: "inference.networking.k8s.io", Version: "v1", Kind: "InferencePool"}:              "inferencepools",
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}:                    "httproutes",
		{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Kind: "InferenceObjective"}: "inferenceobjectives",
	}
	for gvk, plural := range crds {
		if _, err := dyn.Resource(crdGVR).Create(ctx, crdFor(gvk, plural), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD %s: %v", gvk.Kind, err)
		}
	}
	// The CRDs are served once discovery lists them.
	for gvk := range crds {
		for {
			cached.Invalidate()
			mapper.Reset()
			if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("CRD %s never served", gvk.Kind)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The server refuses what strict validation must refuse: the checks below can fail.
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "strictness", "namespace": "default"},
		"data":     map[string]any{"a": "b"}, "dataa": map[string]any{"typo": "x"},
	}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default").
		Create(ctx, bad, metav1.CreateOptions{FieldValidation: "Strict"}); err == nil || !strings.Contains(err.Error(), "dataa") {
		t.Fatalf("an unknown field was not refused: %v", err)
	}

	for i, vf := range valueFiles {
		name := strings.TrimSuffix(filepath.Base(vf), ".yaml")
		ns := fmt.Sprintf("turbine-%d", i)
		t.Run(name, func(t *testing.T) {
			nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
			if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			objs := render(t, helm, chart, ns, vf)
			if len(objs) == 0 {
				t.Fatal("the chart rendered no object")
			}
			kinds := map[string]int{}
			for _, o := range objs {
				gvk := o.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s %s: the API server serves no such kind: %v", gvk, o.GetName(), err)
					continue
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if m.Scope.Name() == "namespace" {
					if o.GetNamespace() == "" {
						o.SetNamespace(ns)
					}
					ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
				} else {
					// Cluster-wide objects of several values files must not collide.
					o.SetName(o.GetName() + "-" + ns)
				}
				if _, err := ri.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict", FieldManager: "turbine-chart-test"}); err != nil {
					t.Errorf("create %s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
					continue
				}
				got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Errorf("get %s %s back: %v", gvk.Kind, o.GetName(), err)
					continue
				}
				if got.GetUID() == "" {
					t.Errorf("%s %s stored without a uid", gvk.Kind, o.GetName())
				}
				kinds[gvk.Kind]++
			}
			t.Logf("created on the API server: %v", kinds)
			for _, want := range []string{"Deployment", "Service"} {
				if kinds[want] == 0 {
					t.Errorf("no %s created", want)
				}
			}
		})
	}
}
