package helm_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload is a Deployment or a StatefulSet: what selects its pods and what they are.
type workload struct {
	kind, name  string
	selector    *metav1.LabelSelector
	replicas    *int32
	tmpl        corev1.PodTemplateSpec
	serviceName string   // StatefulSet
	claims      []string // StatefulSet volumeClaimTemplates
}

func (c *cluster) workloads() []workload {
	var ws []workload
	for _, d := range c.deployments {
		ws = append(ws, workload{kind: "Deployment", name: d.Name, selector: d.Spec.Selector, replicas: d.Spec.Replicas, tmpl: d.Spec.Template})
	}
	for _, s := range c.statefulSets {
		w := workload{kind: "StatefulSet", name: s.Name, selector: s.Spec.Selector, replicas: s.Spec.Replicas, tmpl: s.Spec.Template, serviceName: s.Spec.ServiceName}
		for _, pvc := range s.Spec.VolumeClaimTemplates {
			w.claims = append(w.claims, pvc.Name)
		}
		ws = append(ws, w)
	}
	return ws
}

// selectedBy returns the workloads whose pod template carries every label of sel.
func selectedBy(ws []workload, sel map[string]string) []workload {
	if len(sel) == 0 {
		return nil
	}
	var out []workload
	for _, w := range ws {
		if labels.SelectorFromSet(sel).Matches(labels.Set(w.tmpl.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func selectedByLabelSelector(ws []workload, sel *metav1.LabelSelector) ([]workload, error) {
	if sel == nil {
		return nil, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, err
	}
	var out []workload
	for _, w := range ws {
		if !s.Empty() && s.Matches(labels.Set(w.tmpl.Labels)) {
			out = append(out, w)
		}
	}
	return out, nil
}

// allContainers is a pod's containers and init containers (sidecars among them).
func allContainers(p *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(p.InitContainers), p.Containers...)
}

func containerHasPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

func podHasPort(p *corev1.PodSpec, port intstr.IntOrString) bool {
	return slices.ContainsFunc(allContainers(p), func(c corev1.Container) bool { return containerHasPort(c, port) })
}

// externals are objects a values file names but does not render (existing Secrets and
// the like), as "Kind/name".
type externals map[string]bool

// argRef is a $(VAR) reference in a container's command or arguments.
var argRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkRefs returns every broken cross-reference of a rendered chart: selectors that
// select nothing, ports, probes, Secrets and service accounts that do not exist, the
// planner's and the endpoint picker's targets, grace periods shorter than the drain.
func checkRefs(c *cluster, ext externals) []string {
	var bad []string
	fail := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	ws := c.workloads()

	names := map[string]bool{}
	for _, s := range c.secrets {
		names["Secret/"+s.Name] = true
	}
	for _, cm := range c.configMaps {
		names["ConfigMap/"+cm.Name] = true
	}
	for _, sa := range c.serviceAccounts {
		names["ServiceAccount/"+sa.Name] = true
	}
	for _, s := range c.services {
		names["Service/"+s.Name] = true
	}
	for _, w := range ws {
		names[w.kind+"/"+w.name] = true
	}
	exists := func(kind, name string) bool { return names[kind+"/"+name] || ext[kind+"/"+name] }
	secretKey := func(name, key string) bool {
		if ext["Secret/"+name] {
			return true
		}
		for _, s := range c.secrets {
			if s.Name == name {
				_, a := s.Data[key]
				_, b := s.StringData[key]
				return a || b
			}
		}
		return false
	}

	for _, w := range ws {
		what := w.kind + " " + w.name
		if got, err := selectedByLabelSelector([]workload{w}, w.selector); err != nil || len(got) != 1 {
			fail("%s: its selector does not select its own pod template (%v)", what, err)
		}
		if w.kind == "StatefulSet" {
			found := false
			for _, s := range c.services {
				if s.Name == w.serviceName {
					found = true
					if s.Spec.ClusterIP != corev1.ClusterIPNone {
						fail("%s: serviceName %s is not a headless Service", what, w.serviceName)
					}
				}
			}
			if !found {
				fail("%s: serviceName %q names no Service", what, w.serviceName)
			}
		}
		pod := &w.tmpl.Spec
		if sa := pod.ServiceAccountName; sa != "" && sa != "default" && !exists("ServiceAccount", sa) {
			fail("%s: service account %q does not exist", what, sa)
		}
		volumes := map[string]bool{}
		for _, claim := range w.claims {
			volumes[claim] = true
		}
		for _, v := range pod.Volumes {
			volumes[v.Name] = true
			switch {
			case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional) && !exists("Secret", v.Secret.SecretName):
				fail("%s: volume %s: Secret %q does not exist", what, v.Name, v.Secret.SecretName)
			case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) && !exists("ConfigMap", v.ConfigMap.Name):
				fail("%s: volume %s: ConfigMap %q does not exist", what, v.Name, v.ConfigMap.Name)
			case v.PersistentVolumeClaim != nil && !exists("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName):
				fail("%s: volume %s: PersistentVolumeClaim %q does not exist", what, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
		for _, ctr := range allContainers(pod) {
			cw := fmt.Sprintf("%s container %s", what, ctr.Name)
			env := map[string]corev1.EnvVar{}
			for _, e := range ctr.Env {
				env[e.Name] = e
				if e.Name == "CUDA_VISIBLE_DEVICES" {
					fail("%s: sets CUDA_VISIBLE_DEVICES (the device plugin and the node agent choose the GPUs)", cw)
				}
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil && (r.Optional == nil || !*r.Optional) && !secretKey(r.Name, r.Key) {
					fail("%s: env %s: Secret %q has no key %q", cw, e.Name, r.Name, r.Key)
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil && !exists("Secret", r.Name) && (r.Optional == nil || !*r.Optional) {
					fail("%s: env %s: Secret %q does not exist", cw, e.Name, r.Name)
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil && (r.Optional == nil || !*r.Optional) && !exists("ConfigMap", r.Name) {
					fail("%s: env %s: ConfigMap %q does not exist", cw, e.Name, r.Name)
				}
			}
			for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
				for _, m := range argRef.FindAllStringSubmatch(a, -1) {
					if _, ok := env[m[1]]; !ok {
						fail("%s: argument %q refers to $(%s), which its env does not define", cw, a, m[1])
					}
				}
			}
			for _, vm := range ctr.VolumeMounts {
				if !volumes[vm.Name] {
					fail("%s: mounts volume %q, which the pod does not have", cw, vm.Name)
				}
			}
			for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe} {
				if p == nil {
					continue
				}
				var port intstr.IntOrString
				switch {
				case p.HTTPGet != nil:
					port = p.HTTPGet.Port
				case p.TCPSocket != nil:
					port = p.TCPSocket.Port
				case p.GRPC != nil:
					port = intstr.FromInt32(p.GRPC.Port)
				default:
					continue
				}
				if !containerHasPort(ctr, port) {
					fail("%s: %s probe port %s is not one of its ports", cw, name, port.String())
				}
			}
			lim, req := ctr.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")], ctr.Resources.Requests[corev1.ResourceName("nvidia.com/gpu")]
			if lim.Cmp(req) != 0 {
				fail("%s: nvidia.com/gpu requests %s != limits %s", cw, req.String(), lim.String())
			}
			if d, ok := flagValue(ctr.Args, "drain-timeout"); ok {
				drain, err := time.ParseDuration(d)
				grace := int64(30)
				if pod.TerminationGracePeriodSeconds != nil {
					grace = *pod.TerminationGracePeriodSeconds
				}
				if err != nil {
					fail("%s: --drain-timeout %q: %v", cw, d, err)
				} else if time.Duration(grace)*time.Second < drain+10*time.Second {
					fail("%s: terminationGracePeriodSeconds %d leaves under 10 s after --drain-timeout %s", cw, grace, d)
				}
			}
			if h, ok := flagValue(ctr.Args, "member-host"); ok && h == "0.0.0.0" {
				adv, _ := flagValue(ctr.Args, "advertise-host")
				e, ok := env["POD_IP"]
				if adv != "$(POD_IP)" || !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
					fail("%s: binds 0.0.0.0 but does not advertise its pod IP (--advertise-host=$(POD_IP), POD_IP from status.podIP)", cw)
				}
			}
			checkPlannerTargets(c, ws, pod, ctr, fail)
		}
	}

	for _, s := range c.services {
		sel := selectedBy(ws, s.Spec.Selector)
		if len(sel) == 0 {
			fail("Service %s: its selector %v selects no pod template", s.Name, s.Spec.Selector)
			continue
		}
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			for _, w := range sel {
				if !podHasPort(&w.tmpl.Spec, tp) {
					fail("Service %s: port %s targets %s, which %s %s does not expose", s.Name, p.Name, tp.String(), w.kind, w.name)
				}
			}
		}
	}
	for _, p := range c.pdbs {
		if got, err := selectedByLabelSelector(ws, p.Spec.Selector); err != nil || len(got) == 0 {
			fail("PodDisruptionBudget %s: its selector selects no pod template (%v)", p.Name, err)
		}
	}
	for _, h := range c.hpas {
		ref := h.Spec.ScaleTargetRef
		if !exists(ref.Kind, ref.Name) {
			fail("HorizontalPodAutoscaler %s: target %s/%s does not exist", h.Name, ref.Kind, ref.Name)
		}
		for _, w := range ws {
			if w.kind == ref.Kind && w.name == ref.Name && w.replicas != nil {
				fail("HorizontalPodAutoscaler %s: %s %s sets replicas, which every upgrade would reset", h.Name, w.kind, w.name)
			}
		}
	}
	for _, np := range c.networkPolicies {
		sel, err := selectedByLabelSelector(ws, &np.Spec.PodSelector)
		if err != nil || len(sel) == 0 {
			fail("NetworkPolicy %s: its podSelector selects no pod template (%v)", np.Name, err)
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.Type != intstr.String {
					continue
				}
				if !slices.ContainsFunc(sel, func(w workload) bool { return podHasPort(&w.tmpl.Spec, *p.Port) }) {
					fail("NetworkPolicy %s: port %q is on none of the pods it selects", np.Name, p.Port.StrVal)
				}
			}
		}
	}
	roles := map[string]bool{}
	for _, r := range c.roles {
		roles[r.Name] = true
	}
	for _, rb := range c.roleBindings {
		if rb.RoleRef.Kind != "Role" || !roles[rb.RoleRef.Name] {
			fail("RoleBinding %s: role %s/%s does not exist", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		for _, s := range rb.Subjects {
			if s.Kind == "ServiceAccount" && !exists("ServiceAccount", s.Name) {
				fail("RoleBinding %s: service account %q does not exist", rb.Name, s.Name)
			}
		}
	}
	for _, ip := range c.inferencePools {
		sel := selectedBy(ws, ip.Spec.Selector.MatchLabels)
		if len(sel) == 0 {
			fail("InferencePool %s: its selector selects no pod template", ip.ObjectMeta.Name)
		}
		for _, tp := range ip.Spec.TargetPorts {
			for _, w := range sel {
				if !podHasPort(&w.tmpl.Spec, intstr.FromInt32(tp.Number)) {
					fail("InferencePool %s: target port %d is not a port of %s %s", ip.ObjectMeta.Name, tp.Number, w.kind, w.name)
				}
			}
		}
		if r := ip.Spec.EndpointPickerRef; r != nil {
			i := slices.IndexFunc(c.services, func(s corev1.Service) bool { return s.Name == r.Name })
			switch {
			case i < 0:
				fail("InferencePool %s: endpoint picker Service %q does not exist", ip.ObjectMeta.Name, r.Name)
			case r.Port != nil && !slices.ContainsFunc(c.services[i].Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == r.Port.Number }):
				fail("InferencePool %s: Service %s has no port %d", ip.ObjectMeta.Name, r.Name, r.Port.Number)
			}
		}
	}
	for _, sm := range c.serviceMonitors {
		var matched []corev1.Service
		s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		for _, svc := range c.services {
			if err == nil && s.Matches(labels.Set(svc.Labels)) {
				matched = append(matched, svc)
			}
		}
		if len(matched) == 0 {
			fail("ServiceMonitor %s: its selector selects no Service (%v)", sm.ObjectMeta.Name, err)
		}
		for _, e := range sm.Spec.Endpoints {
			for _, svc := range matched {
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
					fail("ServiceMonitor %s: Service %s has no port named %q", sm.ObjectMeta.Name, svc.Name, e.Port)
				}
			}
		}
	}
	return bad
}

// checkPlannerTargets: a `turbine planner --connector kubernetes` container's --kube-*
// workloads exist, leave their replica count to it, and its service account may update
// their scale subresource.
func checkPlannerTargets(c *cluster, ws []workload, pod *corev1.PodSpec, ctr corev1.Container, fail func(string, ...any)) {
	if len(ctr.Args) == 0 || ctr.Args[0] != "planner" {
		return
	}
	for _, f := range []string{"kube-aggregated", "kube-prefill", "kube-decode"} {
		v, ok := flagValue(ctr.Args, f)
		if !ok {
			continue
		}
		kind, name, _ := strings.Cut(v, "/")
		i := slices.IndexFunc(ws, func(w workload) bool { return strings.EqualFold(w.kind, kind) && w.name == name })
		if i < 0 {
			fail("planner --%s=%s: no such workload", f, v)
			continue
		}
		if ws[i].replicas != nil {
			fail("planner --%s=%s: the workload sets replicas, which every upgrade would reset", f, v)
		}
		resource := strings.ToLower(ws[i].kind) + "s/scale"
		if !saMay(c, pod.ServiceAccountName, "apps", resource, "update") {
			fail("planner --%s=%s: service account %q may not update %s", f, v, pod.ServiceAccountName, resource)
		}
	}
}

// saMay reports whether a Role bound to service account sa grants verb on resource.
func saMay(c *cluster, sa, group, resource, verb string) bool {
	for _, rb := range c.roleBindings {
		if !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
			continue
		}
		for _, r := range c.roles {
			if r.Name != rb.RoleRef.Name {
				continue
			}
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
					return true
				}
			}
		}
	}
	return false
}

// flagValue finds --name=value (or --name value) among args before a "--".
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// intArg reads an integer flag (0 when absent or not a number).
func intArg(args []string, name string) int {
	v, _ := flagValue(args, name)
	n, _ := strconv.Atoi(v)
	return n
}
