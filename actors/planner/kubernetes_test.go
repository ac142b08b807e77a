package planner

import (
	"context"
	"errors"
	"strings"
	"testing"

	core "github.com/turbine-llm/turbine/planner"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func ptr[T any](v T) *T { return &v }

func deployment(name string, replicas, ready, current, updated int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Generation: 3},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(replicas)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: current, ReadyReplicas: ready,
			UpdatedReplicas: updated}}
}

func statefulSet(name string, replicas, ready, current int32, cur, upd string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Generation: 1},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr(replicas)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: current, ReadyReplicas: ready,
			UpdatedReplicas: current, CurrentRevision: cur, UpdateRevision: upd}}
}

// withScale makes the fake clientset serve the scale subresource as the API server
// does: GetScale reads the object's spec.replicas, UpdateScale writes it (the fake's
// object tracker alone does not translate between the two).
func withScale(cs *fake.Clientset) *fake.Clientset {
	tracker := cs.Tracker()
	gvr := func(res string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: res}
	}
	cs.PrependReactor("get", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		get := a.(k8stesting.GetAction)
		obj, err := tracker.Get(gvr(a.GetResource().Resource), a.GetNamespace(), get.GetName())
		if err != nil {
			return true, nil, err
		}
		var n int32
		switch o := obj.(type) {
		case *appsv1.Deployment:
			n = *o.Spec.Replicas
		case *appsv1.StatefulSet:
			n = *o.Spec.Replicas
		}
		return true, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: get.GetName(), Namespace: a.GetNamespace()},
			Spec: autoscalingv1.ScaleSpec{Replicas: n}}, nil
	})
	cs.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		obj, err := tracker.Get(gvr(a.GetResource().Resource), a.GetNamespace(), sc.Name)
		if err != nil {
			return true, nil, err
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			o.Spec.Replicas = ptr(sc.Spec.Replicas)
		case *appsv1.StatefulSet:
			o.Spec.Replicas = ptr(sc.Spec.Replicas)
		}
		if err := tracker.Update(gvr(a.GetResource().Resource), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, sc, nil
	})
	return cs
}

func kubeConnector(t *testing.T, cs *fake.Clientset) *Kubernetes {
	t.Helper()
	k, err := NewKubernetes(cs, KubeConfig{Namespace: "llm", Model: "m", Pools: map[core.Pool]Workload{
		core.PoolPrefill: {Kind: KindDeployment, Name: "prefill"},
		core.PoolDecode:  {Kind: KindStatefulSet, Name: "decode"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKubernetesFleet(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		prefill                   *appsv1.Deployment
		decode                    *appsv1.StatefulSet
		ready, starting, stopping [2]int // prefill, decode
	}{
		{"steady", deployment("prefill", 2, 2, 2, 2), statefulSet("decode", 3, 3, 3, "r1", "r1"),
			[2]int{2, 3}, [2]int{0, 0}, [2]int{0, 0}},
		{"scaling up", deployment("prefill", 4, 2, 4, 4), statefulSet("decode", 3, 1, 3, "r1", "r1"),
			[2]int{2, 1}, [2]int{2, 2}, [2]int{0, 0}},
		{"scaling down", deployment("prefill", 1, 3, 3, 1), statefulSet("decode", 2, 3, 3, "r1", "r1"),
			[2]int{1, 2}, [2]int{0, 0}, [2]int{2, 1}},
		{"rollout", deployment("prefill", 2, 2, 3, 1), statefulSet("decode", 2, 2, 2, "r1", "r2"),
			[2]int{2, 2}, [2]int{1, 1}, [2]int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kubeConnector(t, fake.NewClientset(tc.prefill, tc.decode))
			f, err := k.Fleet(context.Background(), "m")
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range []core.Pool{core.PoolPrefill, core.PoolDecode} {
				if f.Ready[p] != tc.ready[i] || f.Starting[p] != tc.starting[i] || f.Stopping[p] != tc.stopping[i] {
					t.Fatalf("%s: ready %d starting %d stopping %d, want %d %d %d", p, f.Ready[p], f.Starting[p],
						f.Stopping[p], tc.ready[i], tc.starting[i], tc.stopping[i])
				}
			}
		})
	}
}

func TestKubernetesFleetUnobservedGeneration(t *testing.T) {
	d := deployment("prefill", 2, 2, 2, 2)
	d.Generation = 4 // the controller has not seen the latest spec
	k := kubeConnector(t, fake.NewClientset(d, statefulSet("decode", 1, 1, 1, "r", "r")))
	f, err := k.Fleet(context.Background(), "m")
	if err != nil || f.Starting[core.PoolPrefill] != 1 {
		t.Fatalf("fleet %v %v, want one prefill worker starting (step unfinished)", f, err)
	}
}

func TestKubernetesScale(t *testing.T) {
	cs := withScale(fake.NewClientset(deployment("prefill", 2, 2, 2, 2), statefulSet("decode", 3, 3, 3, "r1", "r1")))
	k := kubeConnector(t, cs)
	ctx := context.Background()
	if err := k.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: 4, core.PoolDecode: 1}); err != nil {
		t.Fatal(err)
	}
	d, _ := cs.AppsV1().Deployments("llm").Get(ctx, "prefill", metav1.GetOptions{})
	s, _ := cs.AppsV1().StatefulSets("llm").Get(ctx, "decode", metav1.GetOptions{})
	if *d.Spec.Replicas != 4 || *s.Spec.Replicas != 1 {
		t.Fatalf("replicas prefill %d decode %d, want 4 and 1", *d.Spec.Replicas, *s.Spec.Replicas)
	}
	f, _ := k.Fleet(ctx, "m")
	if f.Ready[core.PoolPrefill] != 2 || f.Starting[core.PoolPrefill] != 2 || f.Ready[core.PoolDecode] != 1 || f.Stopping[core.PoolDecode] != 2 {
		t.Fatalf("fleet after scaling %v", f)
	}
	// An unchanged size is not written: only get actions on a second call.
	cs.ClearActions()
	if err := k.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: 4}); err != nil {
		t.Fatal(err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("unchanged size: action %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

func TestKubernetesErrors(t *testing.T) {
	ctx := context.Background()
	cs := withScale(fake.NewClientset(deployment("prefill", 2, 2, 2, 2)))
	k := kubeConnector(t, cs)
	if _, err := k.Fleet(ctx, "m"); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "pool decode") {
		t.Fatalf("missing StatefulSet: %v", err)
	}
	if _, err := k.Fleet(ctx, "other"); err == nil || !strings.Contains(err.Error(), `model "other"`) {
		t.Fatalf("another model: %v", err)
	}
	err := k.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: 3, core.PoolDecode: 2, core.PoolAggregated: 1})
	for _, want := range []string{"pool aggregated has no Deployment or StatefulSet", "pool decode (statefulset/decode)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Scale: %v, want %q", err, want)
		}
	}
	d, _ := cs.AppsV1().Deployments("llm").Get(ctx, "prefill", metav1.GetOptions{})
	if *d.Spec.Replicas != 3 {
		t.Fatalf("the pool that could scale did not: %d", *d.Spec.Replicas)
	}
	if err := k.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: -1}); err == nil || !strings.Contains(err.Error(), "size -1 < 0") {
		t.Fatalf("negative size: %v", err)
	}
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "prefill", errors.New("changed"))
	})
	if err := k.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: 5}); !apierrors.IsConflict(err) {
		t.Fatalf("conflict: %v", err)
	}
}

func TestNewKubernetesRefusals(t *testing.T) {
	cs := fake.NewClientset()
	pools := map[core.Pool]Workload{core.PoolDecode: {Kind: KindDeployment, Name: "d"}}
	for _, tc := range []struct {
		name string
		cs   *fake.Clientset
		cfg  KubeConfig
		err  string
	}{
		{"no clientset", nil, KubeConfig{Namespace: "n", Pools: pools}, "nil clientset"},
		{"no namespace", cs, KubeConfig{Pools: pools}, "missing namespace"},
		{"no pools", cs, KubeConfig{Namespace: "n"}, "no pool"},
		{"bad kind", cs, KubeConfig{Namespace: "n", Pools: map[core.Pool]Workload{core.PoolDecode: {Kind: "Pod", Name: "d"}}}, "want a named Deployment or StatefulSet"},
		{"no name", cs, KubeConfig{Namespace: "n", Pools: map[core.Pool]Workload{core.PoolDecode: {Kind: KindDeployment}}}, "want a named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.cs == nil {
				_, err = NewKubernetes(nil, tc.cfg)
			} else {
				_, err = NewKubernetes(tc.cs, tc.cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("NewKubernetes: %v, want %q", err, tc.err)
			}
		})
	}
}

func TestParseWorkload(t *testing.T) {
	for in, want := range map[string]Workload{
		"deployment/prefill": {KindDeployment, "prefill"}, "Deployment/p": {KindDeployment, "p"}, "deploy/p": {KindDeployment, "p"},
		"statefulset/decode": {KindStatefulSet, "decode"}, "sts/d": {KindStatefulSet, "d"},
	} {
		got, err := ParseWorkload(in)
		if err != nil || got != want {
			t.Errorf("ParseWorkload(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if w, _ := ParseWorkload("sts/d"); w.String() != "statefulset/d" {
		t.Errorf("String() = %q", w.String())
	}
	for _, in := range []string{"", "prefill", "deployment/", "pod/x", "deployment/a/b"} {
		if _, err := ParseWorkload(in); err == nil {
			t.Errorf("ParseWorkload(%q) accepted", in)
		}
	}
}
