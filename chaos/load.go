package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Request is one request of the load: a prompt of token ids for a model, sent at At.
type Request struct {
	ID        int
	At        time.Duration
	Model     string
	Prompt    []uint32
	MaxTokens int
	// DisconnectAfter, when positive, is when the client cuts the stream on purpose.
	DisconnectAfter time.Duration
}

// body is the request's /v1/completions body: streamed, ignore_eos (so that the output
// is exactly MaxTokens long), the output's token ids in every chunk.
func (r Request) body() []byte {
	b, _ := json.Marshal(map[string]any{
		"model": r.Model, "prompt": r.Prompt, "max_tokens": r.MaxTokens, "stream": true,
		"ignore_eos": true, "return_token_ids": true,
	})
	return b
}

// maxLine bounds one SSE line the client reads.
const maxLine = 4 << 20

// Send streams r to the frontend at base (http://host:port) and records what came back.
// origin is the load's start; limit bounds the whole request (a request past it is a
// "timeout" transport failure).
func Send(ctx context.Context, hc *http.Client, base, frontend string, origin time.Time, r Request, limit time.Duration) (rec Record) {
	rec = Record{ID: r.ID, Frontend: frontend, Model: r.Model, Start: time.Since(origin), MaxTokens: r.MaxTokens}
	defer func() { rec.End = time.Since(origin) }()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var disconnect <-chan time.Time
	if r.DisconnectAfter > 0 {
		t := time.NewTimer(r.DisconnectAfter)
		defer t.Stop()
		disconnect = t.C
	}
	cctx, cut := context.WithCancel(ctx)
	defer cut()
	cutByUs := make(chan struct{})
	go func() {
		select {
		case <-disconnect:
			close(cutByUs)
			cut()
		case <-cctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(r.body()))
	if err != nil {
		rec.Transport = "connect"
		return rec
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", RequestID(r.ID))
	resp, err := hc.Do(req)
	if err != nil {
		rec.Transport = transportKind(err, ctx, cutByUs)
		rec.Disconnect = rec.Transport == "disconnect"
		if rec.Disconnect {
			rec.Transport = ""
		}
		return rec
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			rec.ErrCode = codeString(e.Error.Code)
		}
		return rec
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	sc.Split(completeLines)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			rec.Done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				TokenIDs     []uint32 `json:"token_ids"`
				FinishReason *string  `json:"finish_reason"`
			} `json:"choices"`
			Error *struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			rec.ErrCode = ErrMalformedChunk
			rec.Detail = clip(fmt.Sprintf("%v in %q", err, data), 600)
			return rec
		}
		if chunk.Error != nil {
			rec.ErrCode = codeString(chunk.Error.Code)
			if rec.ErrCode == "" {
				rec.ErrCode = "error_frame_without_code"
			}
		}
		for _, c := range chunk.Choices {
			rec.Tokens = append(rec.Tokens, c.TokenIDs...)
			if c.FinishReason != nil && *c.FinishReason != "" {
				rec.Finish = *c.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		rec.Transport = transportKind(err, ctx, cutByUs)
		if rec.Transport == "disconnect" {
			rec.Transport, rec.Disconnect = "", true
		}
	}
	return rec
}

// completeLines is bufio.ScanLines without the last line when it has no newline: an
// SSE line is only whole once its newline came, and a stream cut inside a line (the
// connection reset, the client's own disconnect) has not sent that line.
func completeLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, bytes.TrimSuffix(data[:i], []byte("\r")), nil
	}
	if atEOF {
		return len(data), nil, nil
	}
	return 0, nil, nil
}

// ErrMalformedChunk is the client's error code for a stream line it could not read as a
// chunk (Record.Detail keeps the line).
const ErrMalformedChunk = "client_malformed_chunk"

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + " … " + s[len(s)-n/2:]
}

func codeString(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case float64:
		b, _ := json.Marshal(v)
		return "code_" + string(b)
	}
	return ""
}

// transportKind names a transport failure: "disconnect" when the client cut it on
// purpose, "timeout" past the request's limit, "connect" when no connection was made,
// "reset" otherwise.
func transportKind(err error, ctx context.Context, cutByUs <-chan struct{}) string {
	select {
	case <-cutByUs:
		return "disconnect"
	default:
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		return "connect"
	}
	if strings.Contains(err.Error(), "connection refused") {
		return "connect"
	}
	return "reset"
}
