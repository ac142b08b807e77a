package kv

import "errors"

// Errors of package kv. Functions wrap them with detail (fmt.Errorf("...: %w", Err...)),
// so callers test with errors.Is.
var (
	// ErrUnknownParent: a BlockStored event names a parent block the worker is not known
	// to hold. Nothing of the event was applied; the index for that worker has a gap and
	// the caller should ask the worker for a full dump.
	ErrUnknownParent = errors.New("kv: parent block unknown for this worker")
	// ErrInvalidEvent: an event is malformed (wrong token count, block size, kind ...).
	ErrInvalidEvent = errors.New("kv: invalid event")
	// ErrBlockSizeMismatch: a worker's KV block size differs from the router's.
	ErrBlockSizeMismatch = errors.New("kv: KV block size mismatch")
	// ErrUnknownWorker: a call names a worker that is not registered.
	ErrUnknownWorker = errors.New("kv: unknown worker")
	// ErrNoWorkers: no ready worker can take the request (none registered, none ready, or
	// all excluded by the request).
	ErrNoWorkers = errors.New("kv: no ready workers")
	// ErrAllBusy: every ready worker is over a busy threshold (docs/reference.md §4); the
	// frontend answers 503.
	ErrAllBusy = errors.New("kv: all workers busy")
	// ErrUnknownPolicy: no routing policy is registered under the requested name.
	ErrUnknownPolicy = errors.New("kv: unknown routing policy")
	// ErrDuplicatePolicy: a routing policy name was registered twice.
	ErrDuplicatePolicy = errors.New("kv: routing policy already registered")
	// ErrInvalidConfig: a configuration value is out of range.
	ErrInvalidConfig = errors.New("kv: invalid configuration")
	// ErrInvalidRequest: a call's arguments are malformed (empty request or worker id,
	// negative overrides ...).
	ErrInvalidRequest = errors.New("kv: invalid request")
	// ErrNoPrefillWorkers: disaggregated serving with Disagg.Enforce, and no ready prefill
	// worker (none registered, none ready, or all excluded) for a request that would be
	// prefilled remotely.
	ErrNoPrefillWorkers = errors.New("kv: no ready prefill workers")
	// ErrInvalidRole: a worker role other than aggregated (or empty), prefill or decode.
	ErrInvalidRole = errors.New("kv: invalid worker role")
	// ErrDumpOrder: a block dump part arrived out of order; the dump must restart.
	ErrDumpOrder = errors.New("kv: block dump part out of order")
)
