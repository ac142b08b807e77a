package options

import (
	"flag"
	"fmt"
	"time"

	"github.com/turbine-llm/turbine/flow"
)

// Migration is the gateway's request-migration flag (docs/reference.md §10).
type Migration struct {
	// MigrationLimit is how many times one request may be re-sent to another worker after
	// its worker or engine failed or its stream stalled; 0 disables migration.
	MigrationLimit int
	// AcceptTimeout is how long a leg waits for its worker's acknowledgement before it
	// moves on as stalled (flow.Config.AcceptTimeout); 0: no bound.
	AcceptTimeout time.Duration
}

// DefaultMigration returns flow.DefaultMigrationLimit (3) and flow.DefaultAcceptTimeout
// (15 s).
func DefaultMigration() Migration {
	return Migration{MigrationLimit: flow.DefaultMigrationLimit, AcceptTimeout: flow.DefaultAcceptTimeout}
}

// FrontendAcceptTimeout is AcceptTimeout as frontend.Config.AcceptTimeout takes it
// (negative: no bound).
func (o *Migration) FrontendAcceptTimeout() time.Duration {
	if o.AcceptTimeout == 0 {
		return -1
	}
	return o.AcceptTimeout
}

// Flags registers --migration-limit on fs.
func (o *Migration) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.MigrationLimit, "migration-limit", o.MigrationLimit,
		"times a request is re-sent to another worker (prompt plus tokens produced so far) when its worker or engine fails or its stream stalls; 0 disables")
	fs.DurationVar(&o.AcceptTimeout, "accept-timeout", o.AcceptTimeout,
		"how long a request sent to a worker waits for the worker to acknowledge it before another worker is asked for; it moves there if the router names one and the first has still said nothing (a partition or a paused worker holds it); 0: no bound")
}

// Validate checks the migration options; errors name the flag.
func (o *Migration) Validate() error {
	if o.MigrationLimit < 0 || o.MigrationLimit > 100 {
		return fmt.Errorf("--migration-limit %d: want 0..100", o.MigrationLimit)
	}
	if o.AcceptTimeout < 0 || o.AcceptTimeout > time.Hour {
		return fmt.Errorf("--accept-timeout %v: want 0 (no bound) to 1h", o.AcceptTimeout)
	}
	return nil
}
