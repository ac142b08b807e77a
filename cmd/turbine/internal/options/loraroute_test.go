package options

import (
	"flag"
	"io"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
)

// TestLoraOnDemandFlag: --lora-on-demand is off by default and read from the flag or
// TURBINE_LORA_ON_DEMAND, the flag winning.
func TestLoraOnDemandFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want bool
	}{
		{"default", "", nil, false},
		{"flag", "", []string{"--lora-on-demand"}, true},
		{"env", "true", nil, true},
		{"flag wins", "true", []string{"--lora-on-demand=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("TURBINE_LORA_ON_DEMAND", tc.env)
			}
			o := DefaultLoraRouting()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			if err := cli.Parse(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			if o.LoraOnDemand != tc.want {
				t.Errorf("LoraOnDemand %v, want %v", o.LoraOnDemand, tc.want)
			}
		})
	}
}
