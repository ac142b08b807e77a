package pool

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// InferencePoolGVR names the Gateway API Inference Extension's InferencePool resource.
// Its Go module is not imported: the picker reads pools through the dynamic client and
// PoolFromUnstructured.
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// InferencePoolListKind is the kind of a list of pools (for dynamic fakes and RESTMappers).
const InferencePoolListKind = "InferencePoolList"

// AppProtocol is how the gateway speaks to a pool's model servers.
type AppProtocol string

// The pool's spec.appProtocol values.
const (
	AppProtocolHTTP AppProtocol = "http"              // HTTP/1.1 (the default)
	AppProtocolH2C  AppProtocol = "kubernetes.io/h2c" // HTTP/2 over cleartext
)

// FailureMode is what the gateway does when the picker does not answer.
type FailureMode string

// The endpointPickerRef.failureMode values.
const (
	FailClose FailureMode = "FailClose" // drop the request (the default)
	FailOpen  FailureMode = "FailOpen"  // send it to an endpoint of the gateway's choosing
)

// InferencePool is the part of an inference.networking.k8s.io/v1 InferencePool the
// picker reads, defaults applied.
type InferencePool struct {
	Namespace, Name string
	// Selector is spec.selector.matchLabels: the pods (in Namespace only) that serve.
	Selector map[string]string
	// TargetPorts is spec.targetPorts[].number: each ready pod is one endpoint per port.
	TargetPorts []int32
	AppProtocol AppProtocol
	// EndpointPicker is spec.endpointPickerRef; nil when absent (optional since v1.5).
	EndpointPicker *EndpointPickerRef
}

// EndpointPickerRef is the pool's reference to its picker.
type EndpointPickerRef struct {
	Group, Kind, Name string // Kind defaults to Service
	Port              int32  // 0 when not given
	FailureMode       FailureMode
}

// PoolFromUnstructured converts and validates an InferencePool as the dynamic client
// returns it. Errors name the field: selector.matchLabels missing, empty or with an
// invalid key or value; targetPorts missing, more than 8, a number outside 1..65535 or
// repeated; an unknown appProtocol; an endpointPickerRef without a name, with a port
// outside 1..65535, without a port when it is a Service, or with an unknown failureMode.
func PoolFromUnstructured(u *unstructured.Unstructured) (InferencePool, error) {
	p := InferencePool{Namespace: u.GetNamespace(), Name: u.GetName(), AppProtocol: AppProtocolHTTP}
	wrap := func(err error) (InferencePool, error) {
		return InferencePool{}, fmt.Errorf("pool: InferencePool %s/%s: %w", p.Namespace, p.Name, err)
	}
	if u.GetAPIVersion() != "" && u.GetAPIVersion() != InferencePoolGVR.GroupVersion().String() {
		return wrap(fmt.Errorf("apiVersion %q, want %q", u.GetAPIVersion(), InferencePoolGVR.GroupVersion().String()))
	}
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return wrap(errors.New("spec missing"))
	}
	var err error
	if p.Selector, err = matchLabels(spec); err != nil {
		return wrap(err)
	}
	if p.TargetPorts, err = targetPorts(spec); err != nil {
		return wrap(err)
	}
	if v, ok, err := unstructured.NestedString(spec, "appProtocol"); err != nil {
		return wrap(fmt.Errorf("spec.appProtocol: %w", err))
	} else if ok && v != "" {
		switch AppProtocol(v) {
		case AppProtocolHTTP, AppProtocolH2C:
			p.AppProtocol = AppProtocol(v)
		default:
			return wrap(fmt.Errorf("spec.appProtocol %q: want %q or %q", v, AppProtocolHTTP, AppProtocolH2C))
		}
	}
	if p.EndpointPicker, err = pickerRef(spec); err != nil {
		return wrap(err)
	}
	return p, nil
}

func matchLabels(spec map[string]any) (map[string]string, error) {
	raw, ok, err := unstructured.NestedFieldNoCopy(spec, "selector", "matchLabels")
	if err != nil || !ok {
		return nil, errors.New("spec.selector.matchLabels missing")
	}
	m, ok := raw.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, errors.New("spec.selector.matchLabels must hold at least one label")
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, ok := m[k].(string)
		if !ok {
			return nil, fmt.Errorf("spec.selector.matchLabels[%q] is not a string", k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("spec.selector.matchLabels key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("spec.selector.matchLabels[%q] value %q: %s", k, v, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func targetPorts(spec map[string]any) ([]int32, error) {
	raw, ok, err := unstructured.NestedFieldNoCopy(spec, "targetPorts")
	if err != nil || !ok {
		return nil, errors.New("spec.targetPorts missing")
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 || len(list) > MaxTargetPorts {
		return nil, fmt.Errorf("spec.targetPorts must list 1 to %d ports", MaxTargetPorts)
	}
	ports := make([]int32, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.targetPorts[%d] is not an object", i)
		}
		n, err := portNumber(m, "number")
		if err != nil || n == 0 {
			return nil, fmt.Errorf("spec.targetPorts[%d].number must be in 1..65535", i)
		}
		if slices.Contains(ports, n) {
			return nil, fmt.Errorf("spec.targetPorts[%d].number %d repeated", i, n)
		}
		ports = append(ports, n)
	}
	return ports, nil
}

// portNumber reads m[key] as a port: 0 when absent, an error when not an integer in
// 1..65535 (JSON numbers may arrive as int64 or float64).
func portNumber(m map[string]any, key string) (int32, error) {
	raw, ok := m[key]
	if !ok {
		return 0, nil
	}
	var n int64
	switch v := raw.(type) {
	case int64:
		n = v
	case int32:
		n = int64(v)
	case int:
		n = int64(v)
	case float64:
		if v != float64(int64(v)) {
			return 0, fmt.Errorf("%v is not an integer", v)
		}
		n = int64(v)
	default:
		return 0, fmt.Errorf("%v is not a number", raw)
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%d is not in 1..65535", n)
	}
	return int32(n), nil
}

func pickerRef(spec map[string]any) (*EndpointPickerRef, error) {
	raw, ok := spec["endpointPickerRef"]
	if !ok || raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("spec.endpointPickerRef is not an object")
	}
	str := func(key string) (string, error) {
		v, ok := m[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("spec.endpointPickerRef.%s is not a string", key)
		}
		return s, nil
	}
	r := &EndpointPickerRef{Kind: "Service", FailureMode: FailClose}
	var err error
	if r.Group, err = str("group"); err != nil {
		return nil, err
	}
	if k, err := str("kind"); err != nil {
		return nil, err
	} else if k != "" {
		r.Kind = k
	}
	if r.Name, err = str("name"); err != nil {
		return nil, err
	}
	if r.Name == "" {
		return nil, errors.New("spec.endpointPickerRef.name missing")
	}
	if port, ok := m["port"].(map[string]any); ok {
		if r.Port, err = portNumber(port, "number"); err != nil {
			return nil, fmt.Errorf("spec.endpointPickerRef.port.number: %w", err)
		}
	}
	if r.Port == 0 && r.Group == "" && r.Kind == "Service" {
		return nil, errors.New("spec.endpointPickerRef.port.number is required for a Service")
	}
	if f, err := str("failureMode"); err != nil {
		return nil, err
	} else if f != "" {
		switch FailureMode(f) {
		case FailClose, FailOpen:
			r.FailureMode = FailureMode(f)
		default:
			return nil, fmt.Errorf("spec.endpointPickerRef.failureMode %q: want %q or %q", f, FailOpen, FailClose)
		}
	}
	return r, nil
}
