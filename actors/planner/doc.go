// Package planner hosts the Planner grain (docs/reference.md §27.4): one per model, it
// merges the frontends' reports, runs the pure planner core (package planner) on a
// timer, and asks a Connector (§27.5) to start, drain or re-role workers.
//
// Grain methods (messages.Planner; callers: frontends and operators, any member):
//   - Report(PlannerReport) → Ack: one frontend's window merged into the current one;
//     a bad report is refused whole (ErrBadReport) and merges nothing.
//   - Status(PlannerStatusRequest) → PlannerStatus: configuration and latest decision.
//   - SetTargets(PlannerSetTargets) → PlannerStatus: targets and GPU budget at run time
//     (ErrBadTargets, nothing changed).
//
// Other messages (ReceiveDefault, sent by the grain's own goroutines to itself): tick
// (the timer), gathered (the connector's fleet and the Router grain's loads), scaled
// (Scale's or WriteDecision's result).
//
// State owned by the grain, on its goroutine only: the core planner (authoritative for
// the targets, the history and the latest decision), the current window and the ids of
// the frontends in it, the fleet the latest decision saw, the connector's last error, and
// busy — set from a tick until its connector calls have answered, so that at most one
// Fleet/Scale sequence is in flight and a slow connector skips ticks instead of queueing
// them. The connector calls run on goroutines that hold no grain state: they get copies
// and send their results back as messages. The fleet is derived, never stored across
// periods: each period asks the connector again, so a grain activated elsewhere starts
// from the fleet as it is.
//
// Connectors: Local (node agents, actors/node), Kubernetes (client-go, scale
// subresource), Virtual (a file or a webhook; a DecisionWriter). Their step planning is
// pure (plan, fleetOf) and tested apart from the I/O.
package planner
