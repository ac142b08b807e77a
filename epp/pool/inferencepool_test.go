package pool

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// readPool decodes testdata/pools/<name> as the dynamic client would hand it over.
func readPool(t testing.TB, name string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pools", name))
	if err != nil {
		t.Fatal(err)
	}
	j, err := utilyaml.ToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestPoolFromUnstructured(t *testing.T) {
	cases := []struct {
		file string
		want InferencePool
		err  string // a substring naming the field; "" when valid
	}{
		{file: "full.yaml", want: InferencePool{Namespace: "serving", Name: "llama",
			Selector:    map[string]string{"app.kubernetes.io/name": "turbine", "turbine.dev/role": "aggregated"},
			TargetPorts: []int32{8000, 8001}, AppProtocol: AppProtocolH2C,
			EndpointPicker: &EndpointPickerRef{Kind: "Service", Name: "llama-epp", Port: 9002, FailureMode: FailOpen}}},
		{file: "minimal.yaml", want: InferencePool{Namespace: "serving", Name: "llama",
			Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000}, AppProtocol: AppProtocolHTTP}},
		{file: "picker_defaults.yaml", want: InferencePool{Namespace: "serving", Name: "llama",
			Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000}, AppProtocol: AppProtocolHTTP,
			EndpointPicker: &EndpointPickerRef{Kind: "Service", Name: "llama-epp", Port: 9002, FailureMode: FailClose}}},
		{file: "bad_no_selector.yaml", err: "spec.selector.matchLabels missing"},
		{file: "bad_empty_selector.yaml", err: "at least one label"},
		{file: "bad_label_value.yaml", err: `spec.selector.matchLabels["app"] value`},
		{file: "bad_no_ports.yaml", err: "spec.targetPorts must list 1 to 8"},
		{file: "bad_nine_ports.yaml", err: "spec.targetPorts must list 1 to 8"},
		{file: "bad_port_zero.yaml", err: "spec.targetPorts[0].number"},
		{file: "bad_port_high.yaml", err: "spec.targetPorts[0].number"},
		{file: "bad_port_repeated.yaml", err: "spec.targetPorts[1].number 8000 repeated"},
		{file: "bad_app_protocol.yaml", err: `spec.appProtocol "grpc"`},
		{file: "bad_picker_no_name.yaml", err: "spec.endpointPickerRef.name missing"},
		{file: "bad_picker_no_port.yaml", err: "spec.endpointPickerRef.port.number is required"},
		{file: "bad_failure_mode.yaml", err: `spec.endpointPickerRef.failureMode "FailSometimes"`},
		{file: "bad_api_version.yaml", err: "apiVersion"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got, err := PoolFromUnstructured(readPool(t, c.file))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "serving/llama") {
					t.Fatalf("err %v, want one naming serving/llama and %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v (picker %+v)\nwant %+v (picker %+v)", got, got.EndpointPicker, c.want, c.want.EndpointPicker)
			}
		})
	}
}

// Numbers arrive as int64 from the API server's JSON and as float64 from a plain
// json.Unmarshal; both are read, a fraction is not.
func TestPoolPortNumberTypes(t *testing.T) {
	for _, c := range []struct {
		v  any
		ok bool
	}{{int64(8000), true}, {float64(8000), true}, {int(8000), true}, {8000.5, false}, {"8000", false}} {
		u := readPool(t, "minimal.yaml")
		u.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": c.v}}
		p, err := PoolFromUnstructured(u)
		if c.ok != (err == nil) {
			t.Fatalf("%T %v: err %v", c.v, c.v, err)
		}
		if c.ok && p.TargetPorts[0] != 8000 {
			t.Fatalf("%T: port %v", c.v, p.TargetPorts)
		}
	}
}
