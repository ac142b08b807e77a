package serve

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--port", "99999"}, "--port"},
		{[]string{"--block-size", "-1"}, "--block-size"},
		{[]string{"--router-mode", "foo"}, "--router-mode"},
		{[]string{"--speedup-ratio", "0"}, "--speedup-ratio"},
		{[]string{"--overlap-weight", "-1"}, "--overlap-weight"},
		{[]string{"--heartbeat", "1ms"}, "--heartbeat"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--tokenizer", "/nonexistent/model"}, "--tokenizer"},
		{[]string{"--workers", "abc"}, "workers"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"--router-temperature", "NaN"}, "--router-temperature"},
		{[]string{"--overlap-weight", "Inf"}, "--overlap-weight"},
		{[]string{"--speedup-ratio", "NaN"}, "--speedup-ratio"},
		{[]string{"--num-gpu-blocks", "1"}, "--max-model-len"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Every case fails before anything binds or starts.
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestDefaultsAreValid(t *testing.T) {
	o := Defaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Port != 8000 || o.Workers != 2 || o.RouterMode != "kv" || o.BlockSize != 64 {
		t.Fatalf("defaults changed: %+v", o)
	}
}
