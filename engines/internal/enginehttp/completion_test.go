package enginehttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// testChoice is a chunk's choice in the test streams: {"c": {"tok": "a", "fin": ""}, "u": 3}.
type testChoice struct {
	Tok string `json:"tok"`
	Fin string `json:"fin"`
}

func decodeTestFrame(data []byte) (*testChoice, *Usage, error) {
	var f struct {
		C *testChoice `json:"c"`
		U *int        `json:"u"`
		E string      `json:"e"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, err
	}
	if f.E != "" {
		return nil, nil, errors.New(f.E)
	}
	var u *Usage
	if f.U != nil {
		u = &Usage{TotalTokens: *f.U}
	}
	return f.C, u, nil
}

func TestCompletionStream(t *testing.T) {
	ev := func(s string) string { return "data: " + s + "\n\n" }
	done := ev("[DONE]")
	cases := []struct {
		name    string
		stream  string
		want    string // the choices handed out, tok:fin/usage
		wantErr string
	}{
		{"usage chunk folded into the finished chunk",
			ev(`{"c":{"tok":"a"}}`) + ev(`{"c":{"tok":"b","fin":"stop"}}`) + ev(`{"u":4}`) + done, "a b:stop/4", ""},
		{"usage on the finished chunk itself", ev(`{"c":{"tok":"a","fin":"length"},"u":2}`) + done, "a:length/2", ""},
		{"the last usage before [DONE] wins", ev(`{"c":{"fin":"stop"},"u":1}`) + ev(`{"u":5}`) + ev(`{"c":{"tok":"x"}}`) + done, ":stop/5", ""},
		{"no usage", ev(`{"c":{"tok":"a","fin":"stop"}}`) + done, "a:stop/-", ""},
		{"empty chunks and a usage chunk before any choice are skipped",
			ev(`{"u":9}`) + ev(`{"c":{}}`) + ev(`{"c":{"tok":"a","fin":"stop"}}`) + done, "a:stop/-", ""},
		{"[DONE] before a finish reason", ev(`{"c":{"tok":"a"}}`) + done, "a", "eng: stream ended with [DONE] before a finish reason"},
		{"cut after the finished chunk", ev(`{"c":{"tok":"a","fin":"stop"}}`), "", "eng: stream ended before [DONE]"},
		{"decode error", ev(`{"c":{"tok":"a"}}`) + ev(`{"e":"bad chunk"}`), "a", "bad chunk"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := openStream(t, context.Background(), tc.stream)
			defer st.Close()
			cs := NewCompletionStream(st, decodeTestFrame, func(c *testChoice) bool { return c.Fin != "" },
				func(c *testChoice) bool { return c.Tok == "" })
			var got []string
			var err error
			for {
				var ch testChoice
				var u *Usage
				ch, u, err = cs.Next()
				if err != nil {
					break
				}
				s := ch.Tok
				if ch.Fin != "" {
					s += ":" + ch.Fin + "/"
					if u != nil {
						s += string(rune('0' + u.TotalTokens))
					} else {
						s += "-"
					}
				} else if u != nil {
					t.Fatalf("usage %+v on a chunk without a finish reason", u)
				}
				got = append(got, s)
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("choices %q, want %q", got, tc.want)
			}
			if tc.wantErr == "" {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("end %v, want io.EOF", err)
				}
				if _, _, err := cs.Next(); !errors.Is(err, io.EOF) {
					t.Fatalf("after the end: %v", err)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
