package pool

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod builds a pod of namespace "serving"; mutate adjusts it.
func pod(name, ip string, labels map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "serving", Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

var (
	vllmLabels  = map[string]string{"app": "vllm", "zone": "a"}
	notReady    = func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionFalse }
	noReadyCond = func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }
	pending     = func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }
	deleting    = func(p *corev1.Pod) { now := metav1.NewTime(time.Unix(1, 0)); p.DeletionTimestamp = &now }
	otherNS     = func(p *corev1.Pod) { p.Namespace = "other" }
)

func TestMembers(t *testing.T) {
	onePort := InferencePool{Namespace: "serving", Name: "llama", Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000}}
	twoPorts := onePort
	twoPorts.TargetPorts = []int32{8001, 8000}
	cases := []struct {
		name string
		pool InferencePool
		pods []*corev1.Pod
		want []Endpoint
	}{
		{name: "ready pods, sorted by address", pool: onePort,
			pods: []*corev1.Pod{pod("b", "10.0.0.9", vllmLabels), pod("a", "10.0.0.10", vllmLabels)},
			want: []Endpoint{{Address: "10.0.0.10:8000", Pod: "serving/a", Labels: vllmLabels}, {Address: "10.0.0.9:8000", Pod: "serving/b", Labels: vllmLabels}}},
		{name: "one endpoint per target port", pool: twoPorts,
			pods: []*corev1.Pod{pod("a", "10.0.0.1", vllmLabels)},
			want: []Endpoint{{Address: "10.0.0.1:8000", Pod: "serving/a", Labels: vllmLabels}, {Address: "10.0.0.1:8001", Pod: "serving/a", Labels: vllmLabels}}},
		{name: "ipv6 bracketed", pool: onePort,
			pods: []*corev1.Pod{pod("a", "fd00::1", vllmLabels)},
			want: []Endpoint{{Address: "[fd00::1]:8000", Pod: "serving/a", Labels: vllmLabels}}},
		{name: "pods that do not serve are left out", pool: onePort,
			pods: []*corev1.Pod{
				pod("not-ready", "10.0.0.1", vllmLabels, notReady),
				pod("no-ready-condition", "10.0.0.2", vllmLabels, noReadyCond),
				pod("pending", "10.0.0.3", vllmLabels, pending),
				pod("deleting", "10.0.0.4", vllmLabels, deleting),
				pod("no-ip", "", vllmLabels),
				pod("other-namespace", "10.0.0.5", vllmLabels, otherNS),
				pod("other-app", "10.0.0.6", map[string]string{"app": "sglang"}),
				pod("no-labels", "10.0.0.7", nil),
				pod("ok", "10.0.0.8", vllmLabels),
			},
			want: []Endpoint{{Address: "10.0.0.8:8000", Pod: "serving/ok", Labels: vllmLabels}}},
		{name: "every selector label must match", pool: InferencePool{Namespace: "serving", Selector: map[string]string{"app": "vllm", "zone": "b"}, TargetPorts: []int32{8000}},
			pods: []*corev1.Pod{pod("a", "10.0.0.1", vllmLabels)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Members(c.pool, c.pods)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestMembersCopiesLabels(t *testing.T) {
	labels := map[string]string{"app": "vllm"}
	eps := Members(InferencePool{Namespace: "serving", Selector: labels, TargetPorts: []int32{1}}, []*corev1.Pod{pod("a", "10.0.0.1", labels)})
	eps[0].Labels["app"] = "changed"
	if labels["app"] != "vllm" {
		t.Fatal("Members shares the pod's label map")
	}
}
