package helm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

// The custom resources the chart renders have no Go type in this module: these structs
// hold every field the chart may write, and decoding rejects any other
// (json.Decoder.DisallowUnknownFields), as client-go's strict decoding does for the
// built-in kinds.

// serviceMonitor is monitoring.coreos.com/v1 ServiceMonitor (the fields the chart writes).
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	ObjectMeta      metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			TLSConfig     *struct {
				InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
				ServerName         string `json:"serverName,omitempty"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// inferencePool is inference.networking.k8s.io/v1 InferencePool (Gateway API Inference
// Extension, api/v1/inferencepool_types.go).
type inferencePool struct {
	metav1.TypeMeta `json:",inline"`
	ObjectMeta      metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		AppProtocol       string `json:"appProtocol,omitempty"`
		EndpointPickerRef *struct {
			Group *string `json:"group,omitempty"`
			Kind  string  `json:"kind,omitempty"`
			Name  string  `json:"name"`
			Port  *struct {
				Number int32 `json:"number"`
			} `json:"port,omitempty"`
			FailureMode string `json:"failureMode,omitempty"`
		} `json:"endpointPickerRef,omitempty"`
	} `json:"spec"`
}

// validate checks the fields the CRD requires (its OpenAPI validation).
func (sm *serviceMonitor) validate() error {
	var errs []error
	if len(sm.Spec.Selector.MatchLabels) == 0 && len(sm.Spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, errors.New("spec.selector is empty"))
	}
	if len(sm.Spec.Endpoints) == 0 {
		errs = append(errs, errors.New("spec.endpoints is empty"))
	}
	for i, e := range sm.Spec.Endpoints {
		if e.Port == "" {
			errs = append(errs, fmt.Errorf("spec.endpoints[%d].port is empty", i))
		}
		if e.Scheme != "" && e.Scheme != "http" && e.Scheme != "https" {
			errs = append(errs, fmt.Errorf("spec.endpoints[%d].scheme %q", i, e.Scheme))
		}
	}
	return errors.Join(errs...)
}

// validate checks the fields the CRD requires (kubebuilder markers of the v1 types).
func (ip *inferencePool) validate() error {
	var errs []error
	if len(ip.Spec.Selector.MatchLabels) == 0 {
		errs = append(errs, errors.New("spec.selector.matchLabels is empty"))
	}
	if n := len(ip.Spec.TargetPorts); n < 1 || n > 8 {
		errs = append(errs, fmt.Errorf("spec.targetPorts: %d ports, want 1 to 8", n))
	}
	for i, p := range ip.Spec.TargetPorts {
		if p.Number < 1 || p.Number > 65535 {
			errs = append(errs, fmt.Errorf("spec.targetPorts[%d].number %d", i, p.Number))
		}
	}
	switch ip.Spec.AppProtocol {
	case "", "http", "kubernetes.io/h2c":
	default:
		errs = append(errs, fmt.Errorf("spec.appProtocol %q", ip.Spec.AppProtocol))
	}
	if r := ip.Spec.EndpointPickerRef; r != nil {
		if r.Name == "" {
			errs = append(errs, errors.New("spec.endpointPickerRef.name is empty"))
		}
		if (r.Kind == "" || r.Kind == "Service") && r.Port == nil {
			errs = append(errs, errors.New("spec.endpointPickerRef.port is required for a Service"))
		}
		if r.FailureMode != "" && r.FailureMode != "FailOpen" && r.FailureMode != "FailClose" {
			errs = append(errs, fmt.Errorf("spec.endpointPickerRef.failureMode %q", r.FailureMode))
		}
	}
	return errors.Join(errs...)
}

// manifest is a rendered chart, every object decoded into its Go type.
type manifest struct {
	typed           []runtime.Object // kinds client-go's scheme knows
	serviceMonitors []*serviceMonitor
	inferencePools  []*inferencePool
}

// strictCodec decodes YAML into client-go's types and fails on unknown or duplicate fields.
var strictCodec = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// decodeManifest splits a multi-document YAML stream (helm template's output) and decodes
// each object strictly. Errors name the document's kind and name.
func decodeManifest(r io.Reader) (*manifest, error) {
	m := &manifest{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document is not YAML: %w\n%s", err, doc)
		}
		if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
			continue // a template that rendered nothing
		}
		var head struct {
			metav1.TypeMeta
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			return nil, fmt.Errorf("document: %w\n%s", err, doc)
		}
		what := head.Kind + " " + head.Metadata.Name
		gvk := head.GroupVersionKind()
		switch {
		case scheme.Scheme.Recognizes(gvk):
			obj, _, err := strictCodec.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			m.typed = append(m.typed, obj)
		case gvk.Group == "monitoring.coreos.com" && gvk.Version == "v1" && gvk.Kind == "ServiceMonitor":
			sm := &serviceMonitor{}
			if err := decodeStrictJSON(js, sm); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if err := sm.validate(); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			m.serviceMonitors = append(m.serviceMonitors, sm)
		case gvk.Group == "inference.networking.k8s.io" && gvk.Version == "v1" && gvk.Kind == "InferencePool":
			ip := &inferencePool{}
			if err := decodeStrictJSON(js, ip); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if err := ip.validate(); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			m.inferencePools = append(m.inferencePools, ip)
		default:
			return nil, fmt.Errorf("%s: kind %s has no Go type here", what, gvk)
		}
	}
}

func decodeStrictJSON(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

// cluster is what the fake API server holds after every typed object was created in it.
type cluster struct {
	deployments     []appsv1.Deployment
	statefulSets    []appsv1.StatefulSet
	services        []corev1.Service
	serviceAccounts []corev1.ServiceAccount
	secrets         []corev1.Secret
	configMaps      []corev1.ConfigMap
	pdbs            []policyv1.PodDisruptionBudget
	hpas            []autoscalingv2.HorizontalPodAutoscaler
	roles           []rbacv1.Role
	roleBindings    []rbacv1.RoleBinding
	networkPolicies []networkingv1.NetworkPolicy
	serviceMonitors []*serviceMonitor
	inferencePools  []*inferencePool
}

// apply creates every typed object of m in client-go's fake clientset, in namespace ns
// (a second object of one kind and name is an error, as on a real API server), and reads
// them back.
func apply(ctx context.Context, m *manifest, ns string) (*cluster, error) {
	cs := fake.NewClientset()
	co := metav1.CreateOptions{}
	for _, obj := range m.typed {
		var err error
		switch o := obj.(type) {
		case *appsv1.Deployment:
			_, err = cs.AppsV1().Deployments(ns).Create(ctx, o, co)
		case *appsv1.StatefulSet:
			_, err = cs.AppsV1().StatefulSets(ns).Create(ctx, o, co)
		case *corev1.Service:
			_, err = cs.CoreV1().Services(ns).Create(ctx, o, co)
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, o, co)
		case *corev1.Secret:
			_, err = cs.CoreV1().Secrets(ns).Create(ctx, o, co)
		case *corev1.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, o, co)
		case *policyv1.PodDisruptionBudget:
			_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, o, co)
		case *autoscalingv2.HorizontalPodAutoscaler:
			_, err = cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, o, co)
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, co)
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, co)
		case *networkingv1.NetworkPolicy:
			_, err = cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, o, co)
		default:
			err = fmt.Errorf("kind %T: not created by this test; add it", obj)
		}
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", objName(obj), err)
		}
	}
	lo := metav1.ListOptions{}
	c := &cluster{serviceMonitors: m.serviceMonitors, inferencePools: m.inferencePools}
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	if l, err := cs.AppsV1().Deployments(ns).List(ctx, lo); err == nil {
		c.deployments = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.AppsV1().StatefulSets(ns).List(ctx, lo); err == nil {
		c.statefulSets = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.CoreV1().Services(ns).List(ctx, lo); err == nil {
		c.services = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, lo); err == nil {
		c.serviceAccounts = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.CoreV1().Secrets(ns).List(ctx, lo); err == nil {
		c.secrets = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, lo); err == nil {
		c.configMaps = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.PolicyV1().PodDisruptionBudgets(ns).List(ctx, lo); err == nil {
		c.pdbs = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.AutoscalingV2().HorizontalPodAutoscalers(ns).List(ctx, lo); err == nil {
		c.hpas = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.RbacV1().Roles(ns).List(ctx, lo); err == nil {
		c.roles = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.RbacV1().RoleBindings(ns).List(ctx, lo); err == nil {
		c.roleBindings = l.Items
	} else {
		keep(err)
	}
	if l, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, lo); err == nil {
		c.networkPolicies = l.Items
	} else {
		keep(err)
	}
	return c, errors.Join(errs...)
}

func objName(obj runtime.Object) string {
	kind := fmt.Sprintf("%T", obj)
	if i := strings.LastIndex(kind, "."); i >= 0 {
		kind = kind[i+1:]
	}
	if m, ok := obj.(metav1.Object); ok {
		return kind + " " + m.GetName()
	}
	return kind
}
