// Package chaos runs a Turbine cluster as separate hosts (network namespaces on one
// machine), replays a production trace through it while a nemesis breaks it on a seeded
// schedule, and checks afterwards that every request is accounted for: each answer the
// client saw complete carries exactly the tokens an undisturbed engine produces, each
// failure is one of the documented kinds and has a cause in the nemesis's timeline, and
// nothing is left running, pinned or leaked once the nemesis stops.
//
// The schedule (Plan), the network rules (Ruleset) and the checker (Check) are pure
// functions of their inputs, tested with scripts under testdata/; Run is the shell that
// owns namespaces, processes, clocks and HTTP. docs/chaos.md describes the rig, the
// nemesis, the checker's rules and what this machine's kernel cannot do.
package chaos
