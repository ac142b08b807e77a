package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseEnvironmentThenFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    int
		wantErr string
	}{
		{"default", nil, nil, 2, ""},
		{"env", map[string]string{"TURBINE_MAX_NUM_SEQS": "7"}, nil, 7, ""},
		{"flag wins over env", map[string]string{"TURBINE_MAX_NUM_SEQS": "7"}, []string{"--max-num-seqs", "9"}, 9, ""},
		{"bad env names the variable", map[string]string{"TURBINE_MAX_NUM_SEQS": "abc"}, nil, 0, "TURBINE_MAX_NUM_SEQS"},
		{"bad flag names the flag", nil, []string{"--max-num-seqs", "x"}, 0, "max-num-seqs"},
		{"positional argument", nil, []string{"extra"}, 0, "unexpected argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			n := fs.Int("max-num-seqs", 2, "")
			help, err := ParseCommand(fs, tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || help || *n != tc.want {
				t.Fatalf("value %d help %v err %v, want %d", *n, help, err, tc.want)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if help, err := ParseCommand(fs, []string{"-h"}); !help || err != nil {
		t.Fatalf("help %v err %v", help, err)
	}
}

func TestLoggerFormats(t *testing.T) {
	var b strings.Builder
	log, err := Logger(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Msg("shown")
	if strings.Contains(b.String(), "hidden") || !strings.Contains(b.String(), `"message":"shown"`) {
		t.Fatalf("log output %q", b.String())
	}
	if _, err := Logger(&b, "xml", "info"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("bad format error %v", err)
	}
	if _, err := Logger(&b, "json", "loud"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("bad level error %v", err)
	}
}
