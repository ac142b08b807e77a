package pool

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Serving reports whether pod may take requests: Running, its Ready condition true, not
// being deleted, and with an IP.
func Serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Members is the endpoints of p among pods: for each pod of p's namespace whose labels
// match p.Selector and that is Serving, one Endpoint per target port (podIP:port), sorted
// by Address. Pure: the Kubernetes source calls it on every change.
func Members(p InferencePool, pods []*corev1.Pod) []Endpoint {
	sel := labels.SelectorFromSet(p.Selector)
	var eps []Endpoint
	for _, pod := range pods {
		if pod.Namespace != p.Namespace || !sel.Matches(labels.Set(pod.Labels)) || !Serving(pod) {
			continue
		}
		for _, port := range p.TargetPorts {
			eps = append(eps, Endpoint{
				Address: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))),
				Pod:     pod.Namespace + "/" + pod.Name,
				Labels:  maps.Clone(pod.Labels),
			})
		}
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return eps
}
