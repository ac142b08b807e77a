package messages

import (
	"strconv"
	"strings"
)

// Labels of the vocabulary's enums (turbine.proto, "vocabulary"): each value's name in
// lower case without its enum's prefix, as metric labels, logs and flags spell them. A
// value outside its enum is labelled "Enum(n)".

var (
	roleLabels     = labels(Role_name, "ROLE_")
	legLabels      = labels(Leg_name, "LEG_")
	decisionLabels = labels(DisaggDecision_name, "DISAGG_")
	outcomeLabels  = labels(RouteOutcome_name, "ROUTE_")
	faultLabels    = labels(Fault_name, "FAULT_")
)

func labels(names map[int32]string, prefix string) map[int32]string {
	out := make(map[int32]string, len(names))
	for v, n := range names {
		out[v] = strings.ToLower(strings.TrimPrefix(n, prefix))
	}
	return out
}

// label is v's label in m, or "<enum>(<v>)" for a value outside the enum.
func label(m map[int32]string, enum string, v int32) string {
	if s, ok := m[v]; ok {
		return s
	}
	return enum + "(" + strconv.Itoa(int(v)) + ")"
}

// parse returns the value labelled s in m, and whether there is one.
func parse(m map[int32]string, s string) (int32, bool) {
	for v, l := range m {
		if l == s {
			return v, true
		}
	}
	return 0, false
}

// Label is "aggregated", "prefill" or "decode".
func (r Role) Label() string { return label(roleLabels, "Role", int32(r)) }

// Label is "aggregated", "prefill" or "decode".
func (l Leg) Label() string { return label(legLabels, "Leg", int32(l)) }

// Label is "aggregated", "remote", "local_short_prefill", "local_prefill_queue",
// "local_no_prefill_workers" or "local_requested".
func (d DisaggDecision) Label() string { return label(decisionLabels, "DisaggDecision", int32(d)) }

// Label is "ok", "no_workers", "all_busy", "unknown_model", "no_prefill_workers",
// "bad_request" or "call_failed".
func (o RouteOutcome) Label() string { return label(outcomeLabels, "RouteOutcome", int32(o)) }

// Label is "none", "worker_terminated", "engine_error", "stalled", "kv_transfer" or
// "invalid_request".
func (f Fault) Label() string { return label(faultLabels, "Fault", int32(f)) }

// ParseRole reads a role's label; "" is ROLE_AGGREGATED. ok is false for anything else.
func ParseRole(s string) (r Role, ok bool) {
	if s == "" {
		return Role_ROLE_AGGREGATED, true
	}
	v, ok := parse(roleLabels, s)
	return Role(v), ok
}

// ParseDisaggDecision reads a decision's label; ok is false for anything else.
func ParseDisaggDecision(s string) (DisaggDecision, bool) {
	v, ok := parse(decisionLabels, s)
	return DisaggDecision(v), ok
}
