package options

import (
	"flag"
	"fmt"

	"github.com/turbine-llm/turbine/flow"
)

// Migration is the gateway's request-migration flag (docs/reference.md §10).
type Migration struct {
	// MigrationLimit is how many times one request may be re-sent to another worker after
	// its worker or engine failed or its stream stalled; 0 disables migration.
	MigrationLimit int
}

// DefaultMigration returns flow.DefaultMigrationLimit (3).
func DefaultMigration() Migration { return Migration{MigrationLimit: flow.DefaultMigrationLimit} }

// Flags registers --migration-limit on fs.
func (o *Migration) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.MigrationLimit, "migration-limit", o.MigrationLimit,
		"times a request is re-sent to another worker (prompt plus tokens produced so far) when its worker or engine fails or its stream stalls; 0 disables")
}

// Validate checks the migration options; errors name the flag.
func (o *Migration) Validate() error {
	if o.MigrationLimit < 0 || o.MigrationLimit > 100 {
		return fmt.Errorf("--migration-limit %d: want 0..100", o.MigrationLimit)
	}
	return nil
}
