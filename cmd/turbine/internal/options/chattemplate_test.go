package options

import (
	"flag"
	"io"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/gateway"
)

// TestTrustRequestChatTemplateFlag parses --trust-request-chat-template and
// TURBINE_TRUST_REQUEST_CHAT_TEMPLATE as serve and frontend do: off by default, and
// what is parsed reaches the gateway's Config.
func TestTrustRequestChatTemplateFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string // "-" leaves TURBINE_TRUST_REQUEST_CHAT_TEMPLATE unset
		args []string
		want bool
		err  bool
	}{
		{"default", "-", nil, false, false},
		{"flag", "-", []string{"--trust-request-chat-template"}, true, false},
		{"flag false", "-", []string{"--trust-request-chat-template=false"}, false, false},
		{"environment", "true", nil, true, false},
		{"environment 1", "1", nil, true, false},
		{"environment false", "false", nil, false, false},
		{"command line wins over environment", "true", []string{"--trust-request-chat-template=false"}, false, false},
		{"environment not a boolean", "yes", nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv(cli.EnvName("trust-request-chat-template"), tc.env)
			}
			o := DefaultHTTP()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			_, err := cli.ParseCommand(fs, tc.args)
			if tc.err {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := o.Gateway(gateway.Config{}).TrustRequestChatTemplate; got != tc.want {
				t.Errorf("gateway.Config.TrustRequestChatTemplate = %v, want %v", got, tc.want)
			}
		})
	}
}
