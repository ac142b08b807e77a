package pool

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
)

// cluster is a fake API server holding InferencePools and Pods, and a Kubernetes source
// following pool serving/llama.
type cluster struct {
	t    *testing.T
	ctx  context.Context
	dyn  *dynamicfake.FakeDynamicClient
	cs   *k8sfake.Clientset
	src  *Kubernetes
	stop context.CancelFunc
}

func newCluster(t *testing.T, pool *unstructured.Unstructured, pods ...*corev1.Pod) *cluster {
	t.Helper()
	var objs []runtime.Object
	if pool != nil {
		objs = append(objs, pool)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: InferencePoolListKind}, objs...)
	var podObjs []runtime.Object
	for _, p := range pods {
		podObjs = append(podObjs, p)
	}
	cs := k8sfake.NewClientset(podObjs...)
	src, err := NewKubernetes(KubernetesConfig{Dynamic: dyn, Clientset: cs, Namespace: "serving", Name: "llama"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &cluster{t: t, ctx: ctx, dyn: dyn, cs: cs, src: src, stop: stop}
	t.Cleanup(func() { stop(); src.Shutdown() })
	src.Start(ctx)
	return c
}

// waitFor waits on the source's change notifications until cond holds.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := c.src.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			c.t.Fatalf("timed out waiting for %s (ready %v, endpoints %v, err %v)", what, c.src.Ready(), c.addrs(), c.src.Err())
		}
	}
}

func (c *cluster) addrs() []string {
	var out []string
	for _, e := range c.src.Endpoints() {
		out = append(out, e.Address)
	}
	return out
}

// waitAddrs waits until the source is ready == ready with exactly addrs.
func (c *cluster) waitAddrs(ready bool, addrs ...string) {
	c.t.Helper()
	c.waitFor("endpoints "+strings.Join(addrs, ","), func() bool {
		return c.src.Ready() == ready && reflect.DeepEqual(c.addrs(), addrs)
	})
}

func (c *cluster) pods() podsAPI { return podsAPI{c} }

type podsAPI struct{ c *cluster }

func (p podsAPI) create(pod *corev1.Pod) {
	p.c.t.Helper()
	if _, err := p.c.cs.CoreV1().Pods(pod.Namespace).Create(p.c.ctx, pod, metav1.CreateOptions{}); err != nil {
		p.c.t.Fatal(err)
	}
}

func (p podsAPI) update(pod *corev1.Pod) {
	p.c.t.Helper()
	if _, err := p.c.cs.CoreV1().Pods(pod.Namespace).Update(p.c.ctx, pod, metav1.UpdateOptions{}); err != nil {
		p.c.t.Fatal(err)
	}
}

func (p podsAPI) delete(name string) {
	p.c.t.Helper()
	if err := p.c.cs.CoreV1().Pods("serving").Delete(p.c.ctx, name, metav1.DeleteOptions{}); err != nil {
		p.c.t.Fatal(err)
	}
}

func (c *cluster) poolAPI() interface {
	Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
	Update(context.Context, *unstructured.Unstructured, metav1.UpdateOptions, ...string) (*unstructured.Unstructured, error)
	Delete(context.Context, string, metav1.DeleteOptions, ...string) error
} {
	return c.dyn.Resource(InferencePoolGVR).Namespace("serving")
}

func TestKubernetesFollowsPods(t *testing.T) {
	c := newCluster(t, readPool(t, "minimal.yaml"),
		pod("a", "10.0.0.1", vllmLabels),
		pod("b", "10.0.0.2", vllmLabels, notReady),
		pod("other", "10.0.0.3", map[string]string{"app": "sglang"}))
	c.waitAddrs(true, "10.0.0.1:8000")
	if p, ok := c.src.Pool(); !ok || p.TargetPorts[0] != 8000 || c.src.Err() != nil {
		t.Fatalf("pool %+v %v, err %v", p, ok, c.src.Err())
	}
	if e := c.src.Endpoints()[0]; e.Pod != "serving/a" || e.Labels["zone"] != "a" {
		t.Fatalf("endpoint %+v", e)
	}

	// A new ready pod joins; b turns ready; a starts terminating; b's IP is reused by a new pod.
	c.pods().create(pod("c", "10.0.0.4", vllmLabels))
	c.waitAddrs(true, "10.0.0.1:8000", "10.0.0.4:8000")
	c.pods().update(pod("b", "10.0.0.2", vllmLabels))
	c.waitAddrs(true, "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.4:8000")
	c.pods().update(pod("a", "10.0.0.1", vllmLabels, deleting))
	c.waitAddrs(true, "10.0.0.2:8000", "10.0.0.4:8000")
	c.pods().delete("a")
	c.pods().delete("c")
	c.waitAddrs(true, "10.0.0.2:8000")
	// The relabelled pod leaves; a pod in another namespace never counts.
	c.pods().update(pod("b", "10.0.0.2", map[string]string{"app": "sglang"}))
	c.pods().create(pod("elsewhere", "10.0.0.9", vllmLabels, otherNS))
	c.waitAddrs(true)
}

func TestKubernetesFollowsPool(t *testing.T) {
	c := newCluster(t, readPool(t, "minimal.yaml"),
		pod("v", "10.0.0.1", vllmLabels),
		pod("s", "10.0.0.2", map[string]string{"app": "sglang"}))
	c.waitAddrs(true, "10.0.0.1:8000")

	// Selector and ports change: the pods are filtered again.
	u := readPool(t, "minimal.yaml")
	u.Object["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": map[string]any{"app": "sglang"}}
	u.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(30000)}, map[string]any{"number": int64(30001)}}
	if _, err := c.poolAPI().Update(c.ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitAddrs(true, "10.0.0.2:30000", "10.0.0.2:30001")

	// An invalid spec: no endpoints, not ready, the field named.
	u.Object["spec"].(map[string]any)["targetPorts"] = []any{}
	if _, err := c.poolAPI().Update(c.ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitAddrs(false)
	if err := c.src.Err(); err == nil || !strings.Contains(err.Error(), "spec.targetPorts") {
		t.Fatalf("err %v", err)
	}

	// Deleted: none, not ready; created again: back.
	if err := c.poolAPI().Delete(c.ctx, "llama", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("pool gone", func() bool {
		err := c.src.Err()
		return err != nil && strings.Contains(err.Error(), "not found")
	})
	if c.src.Ready() || len(c.src.Endpoints()) != 0 {
		t.Fatal("a deleted pool still serves")
	}
	if _, err := c.poolAPI().Create(c.ctx, readPool(t, "minimal.yaml"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitAddrs(true, "10.0.0.1:8000")
}

func TestKubernetesPoolAbsentAtStart(t *testing.T) {
	c := newCluster(t, nil, pod("v", "10.0.0.1", vllmLabels))
	c.waitFor("synced without a pool", func() bool {
		err := c.src.Err()
		return err != nil && strings.Contains(err.Error(), "InferencePool serving/llama not found")
	})
	if c.src.Ready() {
		t.Fatal("ready without a pool")
	}
	// A pool of the same name in another namespace is not ours.
	other := readPool(t, "minimal.yaml")
	other.SetNamespace("elsewhere")
	if _, err := c.dyn.Resource(InferencePoolGVR).Namespace("elsewhere").Create(c.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// So is another pool of the namespace.
	another := readPool(t, "minimal.yaml")
	another.SetName("another")
	if _, err := c.poolAPI().Create(c.ctx, another, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.poolAPI().Create(c.ctx, readPool(t, "minimal.yaml"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitAddrs(true, "10.0.0.1:8000")
	if err := c.poolAPI().Delete(c.ctx, "llama", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitAddrs(false)
}

func TestNewKubernetesNeedsNames(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	cs := k8sfake.NewClientset()
	for _, c := range []struct {
		cfg KubernetesConfig
		err string
	}{
		{KubernetesConfig{Dynamic: dyn, Clientset: cs, Namespace: "serving"}, "--pool-name"},
		{KubernetesConfig{Dynamic: dyn, Clientset: cs, Name: "llama"}, "--pool-namespace"},
		{KubernetesConfig{Clientset: cs, Namespace: "serving", Name: "llama"}, "dynamic client"},
	} {
		if _, err := NewKubernetes(c.cfg); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("err %v, want %q", err, c.err)
		}
	}
}

// The Kubernetes source wrapped in a Scraper: pods found, their /metrics read.
func TestKubernetesWithScraper(t *testing.T) {
	e := newEngine(t, "vllm_dp2.txt")
	host, port := splitAddr(t, e.addr())
	u := readPool(t, "minimal.yaml")
	u.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(port)}}
	c := newCluster(t, u, pod("v", host, vllmLabels))
	c.waitAddrs(true, e.addr())
	scraped := make(chan string, 8)
	s := NewScraper(c.src, ScrapeConfig{Interval: time.Hour, OnScrape: func(a string, err error) {
		if err == nil {
			scraped <- a
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	select {
	case a := <-scraped:
		if l, ok := s.Load(a); a != e.addr() || !ok || l.Running != 21 {
			t.Fatalf("scraped %s: %+v %v", a, l, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pod was not scraped")
	}
	if !s.Ready() || len(s.Endpoints()) != 1 {
		t.Fatal("the scraper does not pass the source through")
	}
}
