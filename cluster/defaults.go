package cluster

import "time"

// Defaults of Config and ConsulOptions: a zero field takes the value here.
const (
	DefaultName            = "turbine"
	DefaultHost            = "127.0.0.1"
	DefaultConsulPort      = 8500
	DefaultMaxMessageBytes = 64 << 20 // gRPC's own 4 MiB would cap each batch of actor messages (docs/actor-library.md §5)

	// DefaultTTL is the Consul TTL check's time to live: a member that does not refresh it
	// for this long turns critical and leaves the others' topology.
	DefaultTTL = 3 * time.Second
	// DefaultRefreshTTL is how often a member refreshes its TTL check.
	DefaultRefreshTTL = time.Second
	// DefaultDeregisterCritical is how long Consul keeps a critical member's registration
	// before removing it (DeregisterCriticalServiceAfter; Consul reaps at most once a
	// minute).
	DefaultDeregisterCritical = 60 * time.Second

	// RegisterBackoffMin and RegisterBackoffMax bound the capped exponential backoff (with
	// jitter) between failed registrations and failed membership queries.
	RegisterBackoffMin = 100 * time.Millisecond
	RegisterBackoffMax = 5 * time.Second

	// DefaultWatchdogInterval is how often the zombie watchdog looks at the member.
	DefaultWatchdogInterval = time.Second

	// GrainRetryMin and GrainRetryMax bound the pause before a grain call's next attempt
	// (docs/actor-library.md §8): it doubles from GrainRetryMin after each attempt that
	// found no activation or a dead one, up to GrainRetryMax, and never runs past the
	// call's timeout.
	GrainRetryMin = 50 * time.Millisecond
	GrainRetryMax = 400 * time.Millisecond
)

const (
	// peerConnectAttempts is how many times protoactor's endpoint writer tries to connect
	// to a peer before it drops the peer's messages (docs/actor-library.md §6: its 5, 2 s
	// apart, hold Member.Stop for up to 10 s after a peer died).
	peerConnectAttempts = 2
	// blockingWait is the longest a membership query waits for a change.
	blockingWait = 20 * time.Second
	// stillFailingEvery is how often a failure that lasts is logged again.
	stillFailingEvery = time.Minute
	// absentChecksLimit is how many watchdog checks in a row may find the member missing
	// from its own member list, with the provider healthy, before it counts as lost.
	absentChecksLimit = 3
	// peerSilenceLimit is how long a peer's gossiped topology may leave the member out, or
	// every live peer stay silent, before the member counts as dropped: less than
	// protoactor's heartbeat expiry (20 s, docs/actor-library.md §2), past which it would
	// block those peers in turn.
	peerSilenceLimit = 10 * time.Second
	// pauseMargin is how much longer than its health check's TTL a process must have been
	// stopped (SIGSTOP, a frozen VM) for the watchdog to take it as dropped: by then its
	// check has been critical long enough for every member watching Consul to have seen it
	// fail, dropped it and blocked its id.
	pauseMargin = time.Second
	// lapseGrace is how long a live peer may stay silent, from lapseGrace to lapseWindow
	// after discovery took a lapsed member back, before the member counts as dropped:
	// gossip between members that kept it resumes within a second or two, and a peer
	// that went quiet itself (paused, killed) stops passing its check within the TTL
	// (the grace is at least TTL + pauseMargin + 1 s).
	lapseGrace = 5 * time.Second
	// lapseWindow is how long after a lapse a peer's silence is taken as its dropping the
	// member; later, the slower signs alone decide.
	lapseWindow = 30 * time.Second
	// pauseTick is how often the watchdog's clock wakes to measure pauses.
	pauseTick = 100 * time.Millisecond
	// maxBlockedBy bounds the peer ids (remote input) the watchdog keeps per check from
	// "blocked" answers, and those it remembers having logged.
	maxBlockedBy = 64
	// activationTimeout bounds the request for a grain's PID to the identity's owner
	// member (the library's waits a fixed 5 s: docs/actor-library.md §7).
	activationTimeout = time.Second
	// unknownTypeLogEvery rate-limits the log line for remote messages of unknown types,
	// per type name.
	unknownTypeLogEvery = 10 * time.Second
	// handshakeLogEvery rate-limits the log line for failed mutual-TLS handshakes, per
	// peer host, side and error (tls.go).
	handshakeLogEvery = 10 * time.Second
)

// DefaultRecoveryWindow is the recovery window for a TTL: 2×TTL plus the longest
// registration backoff — time enough for every member to notice that the agent lost its
// registration and to register again.
func DefaultRecoveryWindow(ttl time.Duration) time.Duration {
	return 2*ttl + RegisterBackoffMax
}
