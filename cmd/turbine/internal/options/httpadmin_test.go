package options

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/gateway"
)

// parseHTTP parses args (after the environment) into DefaultHTTP's flags and validates.
func parseHTTP(t *testing.T, args []string) (HTTP, error) {
	t.Helper()
	o := DefaultHTTP()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Flags(fs)
	if _, err := cli.ParseCommand(fs, args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// TestAdminAPIKeyFlag: --admin-api-key and TURBINE_ADMIN_API_KEY, parsed as --api-key
// is, reach gateway.Config.AdminAPIKeys, apart from the API keys.
func TestAdminAPIKeyFlag(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       string // TURBINE_ADMIN_API_KEY; "-" leaves it unset
		args      []string
		want, api []string
		err       string
	}{
		{"none", "-", nil, nil, nil, ""},
		{"flag", "-", []string{"--admin-api-key", "sk-adm"}, []string{"sk-adm"}, nil, ""},
		{"several", "-", []string{"--admin-api-key", "sk-a, sk-b", "--admin-api-key", "sk-c"}, []string{"sk-a", "sk-b", "sk-c"}, nil, ""},
		{"environment", "sk-env", nil, []string{"sk-env"}, nil, ""},
		{"command line wins", "sk-env", []string{"--admin-api-key", "sk-adm"}, []string{"sk-adm"}, nil, ""},
		{"apart from api keys", "-", []string{"--api-key", "sk-api", "--admin-api-key", "sk-adm"}, []string{"sk-adm"}, []string{"sk-api"}, ""},
		{"empty", "-", []string{"--admin-api-key", "sk-a,"}, nil, nil, "--admin-api-key: key 2 of 2 is empty"},
		{"empty environment", "", nil, nil, nil, "--admin-api-key: key 1 of 1 is empty"},
		{"control character", "-", []string{"--admin-api-key", "sk-\x02"}, nil, nil, "--admin-api-key: key 1 of 1 has a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv(cli.EnvName("admin-api-key"), tc.env)
			}
			o, err := parseHTTP(t, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "sk-") {
					t.Errorf("the error %q shows a key", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := o.Gateway(gateway.Config{})
			if !slices.Equal(cfg.AdminAPIKeys, tc.want) || !slices.Equal(cfg.APIKeys, tc.api) {
				t.Errorf("admin keys %q, API keys %q; want %q, %q", cfg.AdminAPIKeys, cfg.APIKeys, tc.want, tc.api)
			}
		})
	}
}

func TestAdminAPIKeyHelpHidesKeys(t *testing.T) {
	t.Setenv(cli.EnvName("admin-api-key"), "sk-admin-secret")
	o := DefaultHTTP()
	var out strings.Builder
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&out)
	o.Flags(fs)
	if help, err := cli.ParseCommand(fs, []string{"-h"}); !help || err != nil {
		t.Fatalf("help %v err %v", help, err)
	}
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "-admin-api-key keys") || strings.Contains(out.String(), "sk-admin-secret") {
		t.Errorf("usage %q: want -admin-api-key listed and no key", out.String())
	}
}

// TestStreamWriteTimeoutFlag: the default is the gateway's; 0 turns the deadline off
// (the gateway's "negative"), not back to its default.
func TestStreamWriteTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want time.Duration // in gateway.Config
		err  string
	}{
		{"default", "-", nil, gateway.DefaultStreamWriteTimeout, ""},
		{"flag", "-", []string{"--stream-write-timeout", "5s"}, 5 * time.Second, ""},
		{"environment", "90s", nil, 90 * time.Second, ""},
		{"off", "-", []string{"--stream-write-timeout", "0"}, -1, ""},
		{"negative", "-", []string{"--stream-write-timeout", "-1s"}, 0, "--stream-write-timeout -1s: must be ≥ 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv(cli.EnvName("stream-write-timeout"), tc.env)
			}
			o, err := parseHTTP(t, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.Gateway(gateway.Config{}).StreamWriteTimeout; got != tc.want {
				t.Errorf("gateway StreamWriteTimeout %v, want %v", got, tc.want)
			}
		})
	}
}
