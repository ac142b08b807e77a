package messages

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// labeled is a vocabulary enum value.
type labeled interface {
	Label() string
	Number() protoreflect.EnumNumber
	Descriptor() protoreflect.EnumDescriptor
}

// TestLabels: every value of the vocabulary is labelled with its name in lower case
// without its enum's prefix (the metric labels and log fields spell them so); a value
// outside its enum is "Enum(n)".
func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		v    labeled
		want string
	}{
		{Role_ROLE_AGGREGATED, "aggregated"},
		{Role_ROLE_PREFILL, "prefill"},
		{Role_ROLE_DECODE, "decode"},
		{Role(3), "Role(3)"},
		{Role(-1), "Role(-1)"},
		{Leg_LEG_AGGREGATED, "aggregated"},
		{Leg_LEG_PREFILL, "prefill"},
		{Leg_LEG_DECODE, "decode"},
		{Leg(9), "Leg(9)"},
		{DisaggDecision_DISAGG_AGGREGATED, "aggregated"},
		{DisaggDecision_DISAGG_REMOTE, "remote"},
		{DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL, "local_short_prefill"},
		{DisaggDecision_DISAGG_LOCAL_PREFILL_QUEUE, "local_prefill_queue"},
		{DisaggDecision_DISAGG_LOCAL_NO_PREFILL_WORKERS, "local_no_prefill_workers"},
		{DisaggDecision_DISAGG_LOCAL_REQUESTED, "local_requested"},
		{DisaggDecision(6), "DisaggDecision(6)"},
		{RouteOutcome_ROUTE_OK, "ok"},
		{RouteOutcome_ROUTE_NO_WORKERS, "no_workers"},
		{RouteOutcome_ROUTE_ALL_BUSY, "all_busy"},
		{RouteOutcome_ROUTE_UNKNOWN_MODEL, "unknown_model"},
		{RouteOutcome_ROUTE_NO_PREFILL_WORKERS, "no_prefill_workers"},
		{RouteOutcome_ROUTE_BAD_REQUEST, "bad_request"},
		{RouteOutcome_ROUTE_CALL_FAILED, "call_failed"},
		{RouteOutcome(100), "RouteOutcome(100)"},
		{Fault_FAULT_NONE, "none"},
		{Fault_FAULT_WORKER_TERMINATED, "worker_terminated"},
		{Fault_FAULT_ENGINE_ERROR, "engine_error"},
		{Fault_FAULT_STALLED, "stalled"},
		{Fault_FAULT_KV_TRANSFER, "kv_transfer"},
		{Fault_FAULT_INVALID_REQUEST, "invalid_request"},
		{Fault(6), "Fault(6)"},
	} {
		if got := tc.v.Label(); got != tc.want {
			t.Errorf("%s %d: label %q, want %q", tc.v.Descriptor().Name(), tc.v.Number(), got, tc.want)
		}
	}
}

// TestLabelsCoverEveryValue: each enum of the vocabulary labels every value it declares,
// with labels unique within the enum — a value added to turbine.proto gets its label.
func TestLabelsCoverEveryValue(t *testing.T) {
	type number = protoreflect.EnumNumber
	for _, e := range []struct {
		d     protoreflect.EnumDescriptor
		label func(number) string
	}{
		{Role(0).Descriptor(), func(n number) string { return Role(n).Label() }},
		{Leg(0).Descriptor(), func(n number) string { return Leg(n).Label() }},
		{DisaggDecision(0).Descriptor(), func(n number) string { return DisaggDecision(n).Label() }},
		{RouteOutcome(0).Descriptor(), func(n number) string { return RouteOutcome(n).Label() }},
		{Fault(0).Descriptor(), func(n number) string { return Fault(n).Label() }},
	} {
		seen := map[string]number{}
		for i := 0; i < e.d.Values().Len(); i++ {
			n := e.d.Values().Get(i).Number()
			l := e.label(n)
			if l == "" || l == string(e.d.Name())+"("+strconv.Itoa(int(n))+")" {
				t.Errorf("%s value %d has no label (%q)", e.d.Name(), n, l)
			}
			if prev, dup := seen[l]; dup {
				t.Errorf("%s values %d and %d are both labelled %q", e.d.Name(), prev, n, l)
			}
			seen[l] = n
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   Role
		wantOK bool
	}{
		{"", Role_ROLE_AGGREGATED, true},
		{"aggregated", Role_ROLE_AGGREGATED, true},
		{"prefill", Role_ROLE_PREFILL, true},
		{"decode", Role_ROLE_DECODE, true},
		{"both", 0, false},
		{"Prefill", 0, false},
		{"ROLE_PREFILL", 0, false},
		{"Role(3)", 0, false},
		{" prefill", 0, false},
	} {
		got, ok := ParseRole(tc.in)
		if ok != tc.wantOK || ok && got != tc.want {
			t.Errorf("ParseRole(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
	for n := range Role_name {
		if r, ok := ParseRole(Role(n).Label()); !ok || r != Role(n) {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", Role(n).Label(), r, ok, Role(n))
		}
	}
}

func TestParseDisaggDecision(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   DisaggDecision
		wantOK bool
	}{
		{"aggregated", DisaggDecision_DISAGG_AGGREGATED, true},
		{"remote", DisaggDecision_DISAGG_REMOTE, true},
		{"local_short_prefill", DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL, true},
		{"local_prefill_queue", DisaggDecision_DISAGG_LOCAL_PREFILL_QUEUE, true},
		{"local_no_prefill_workers", DisaggDecision_DISAGG_LOCAL_NO_PREFILL_WORKERS, true},
		{"local_requested", DisaggDecision_DISAGG_LOCAL_REQUESTED, true},
		{"", 0, false},
		{"local", 0, false},
		{"DISAGG_REMOTE", 0, false},
		{"Remote", 0, false},
	} {
		got, ok := ParseDisaggDecision(tc.in)
		if ok != tc.wantOK || ok && got != tc.want {
			t.Errorf("ParseDisaggDecision(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
	for n := range DisaggDecision_name {
		d := DisaggDecision(n)
		if got, ok := ParseDisaggDecision(d.Label()); !ok || got != d {
			t.Errorf("ParseDisaggDecision(%q) = %v, %v; want %v", d.Label(), got, ok, d)
		}
	}
}
