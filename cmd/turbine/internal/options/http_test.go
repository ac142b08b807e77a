package options

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/gateway"
)

// TestAPIKeyFlag parses --api-key and TURBINE_API_KEY as a subcommand does (environment
// first, then the command line) and validates.
func TestAPIKeyFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string // TURBINE_API_KEY; "-" leaves it unset
		args []string
		want []string
		err  string // "" means valid; else a part of the error
	}{
		{"none", "-", nil, nil, ""},
		{"one", "-", []string{"--api-key", "sk-a"}, []string{"sk-a"}, ""},
		{"comma-separated", "-", []string{"--api-key", "sk-a,sk-b"}, []string{"sk-a", "sk-b"}, ""},
		{"spaces trimmed", "-", []string{"--api-key", " sk-a , sk-b "}, []string{"sk-a", "sk-b"}, ""},
		{"repeated", "-", []string{"--api-key", "sk-a", "--api-key=sk-b,sk-c"}, []string{"sk-a", "sk-b", "sk-c"}, ""},
		{"environment", "sk-e", nil, []string{"sk-e"}, ""},
		{"environment comma-separated", "sk-e,sk-f", nil, []string{"sk-e", "sk-f"}, ""},
		{"command line wins over environment", "sk-e", []string{"--api-key", "sk-a", "--api-key", "sk-b"}, []string{"sk-a", "sk-b"}, ""},
		{"empty flag", "-", []string{"--api-key", ""}, nil, "--api-key: key 1 of 1 is empty"},
		{"empty among keys", "-", []string{"--api-key", "sk-a,,sk-b"}, nil, "--api-key: key 2 of 3 is empty"},
		{"trailing comma", "-", []string{"--api-key", "sk-a,"}, nil, "--api-key: key 2 of 2 is empty"},
		{"blank key", "-", []string{"--api-key", "sk-a", "--api-key", "  "}, nil, "--api-key: key 2 of 2 is empty"},
		{"empty environment", "", nil, nil, "--api-key: key 1 of 1 is empty"},
		{"control character", "-", []string{"--api-key", "sk-\x01a"}, nil, "--api-key: key 1 of 1 has a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv(cli.EnvName("api-key"), tc.env)
			}
			o := DefaultHTTP()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			if _, err := cli.ParseCommand(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
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
			if !slices.Equal(o.APIKeys, tc.want) {
				t.Errorf("keys %q, want %q", o.APIKeys, tc.want)
			}
		})
	}
}

// TestAPIKeyHelpHidesKeys checks that usage text never prints a key, even one set from
// the environment.
func TestAPIKeyHelpHidesKeys(t *testing.T) {
	t.Setenv(cli.EnvName("api-key"), "sk-secret")
	o := DefaultHTTP()
	var out strings.Builder
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&out)
	o.Flags(fs)
	if help, err := cli.ParseCommand(fs, []string{"-h"}); !help || err != nil {
		t.Fatalf("help %v err %v", help, err)
	}
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "-api-key keys") || strings.Contains(out.String(), "sk-secret") {
		t.Errorf("usage %q: want -api-key listed and no key", out.String())
	}
	if got := fs.Lookup("api-key").Value.String(); strings.Contains(got, "sk-secret") {
		t.Errorf("the flag's value prints as %q", got)
	}
}

// TestCORSFlags: --allowed-origins and its kin take vLLM's JSON lists or comma-separated
// lists; the default is vLLM's (any origin, method and header); credentials need named
// origins; an empty origin list turns the policy off.
func TestCORSFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		origins []string
		methods []string
		cors    bool // the gateway gets a policy
		err     string
	}{
		{"default", nil, []string{"*"}, []string{"*"}, true, ""},
		{"json list", []string{`--allowed-origins=["https://a.example", "https://b.example"]`}, []string{"https://a.example", "https://b.example"}, []string{"*"}, true, ""},
		{"comma-separated", []string{"--allowed-origins", "https://a.example, https://b.example", "--allowed-methods", "GET,POST"}, []string{"https://a.example", "https://b.example"}, []string{"GET", "POST"}, true, ""},
		{"off", []string{"--allowed-origins", "[]"}, nil, []string{"*"}, false, ""},
		{"credentials with named origins", []string{"--allowed-origins", "https://a.example", "--allow-credentials"}, []string{"https://a.example"}, []string{"*"}, true, ""},
		{"credentials with any origin", []string{"--allow-credentials"}, nil, nil, false, "--allow-credentials"},
		{"bad json", []string{"--allowed-origins", `["a",`}, nil, nil, false, "JSON list"},
		{"json not strings", []string{"--allowed-origins", `[1]`}, nil, nil, false, "JSON list"},
		{"empty entry", []string{"--allowed-origins", `["a", ""]`}, nil, nil, false, "empty entry"},
		{"no methods", []string{"--allowed-methods", "[]"}, nil, nil, false, "at least one"},
		{"no headers", []string{"--allowed-headers", ""}, nil, nil, false, "at least one"},
		{"no methods with CORS off", []string{"--allowed-origins", "[]", "--allowed-methods", "[]"}, nil, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultHTTP()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			err := fs.Parse(tc.args)
			if err == nil {
				err = o.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.CORS.AllowedOrigins, tc.origins) || !slices.Equal(o.CORS.AllowedMethods, tc.methods) {
				t.Errorf("origins %q methods %q, want %q %q", o.CORS.AllowedOrigins, o.CORS.AllowedMethods, tc.origins, tc.methods)
			}
			if cfg := o.Gateway(gateway.Config{}); (cfg.CORS != nil) != tc.cors {
				t.Errorf("gateway policy %+v, want one: %v", cfg.CORS, tc.cors)
			}
		})
	}
}
