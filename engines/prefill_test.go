package engines

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"
)

// prefillServer answers POST / as a prefill leg's engine: entered is closed when a
// request arrived; with partial set it sends the first part of its answer at once; the
// answer (or its rest) waits for answer, unless the request is aborted first, which
// aborted then reports.
type prefillServer struct {
	partial                  bool
	entered, answer, aborted chan struct{}
}

const prefillAnswer = `{"kv_transfer_params":{"remote_block_ids":[1,2]}}`

func (p *prefillServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	close(p.entered)
	rest := prefillAnswer
	if p.partial {
		w.Header().Set("Content-Length", "49")
		_, _ = io.WriteString(w, prefillAnswer[:20])
		w.(http.Flusher).Flush()
		rest = prefillAnswer[20:]
	}
	select {
	case <-p.answer:
		_, _ = io.WriteString(w, rest)
	case <-r.Context().Done():
		close(p.aborted)
	case <-time.After(10 * time.Second):
	}
}

// TestFinishPrefillCancelledBefore: a leg cancelled before it was sent is not sent.
func TestFinishPrefillCancelledBefore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := FinishPrefill(ctx, time.Minute, func(context.Context) (string, error) { called = true; return "", nil })
	if called || !errors.Is(err, context.Canceled) {
		t.Fatalf("called %v, error %v; want no call and context.Canceled", called, err)
	}
}

// TestFinishPrefill: a prefill leg's answer that arrives after its context ended is
// still read when the leg may run on (grace) or when its answer had begun; otherwise the
// request is aborted, at once or once grace is over.
func TestFinishPrefill(t *testing.T) {
	if len(prefillAnswer) != 49 {
		t.Fatalf("prefillAnswer is %d bytes; fix Content-Length", len(prefillAnswer))
	}
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		partial bool
		cancel  bool
		// answerAfterCancel: the engine answers once the context ended; else it never
		// does unless aborted.
		answerAfterCancel bool
		wantAnswer        bool
	}{
		{name: "not cancelled", answerAfterCancel: true, wantAnswer: true},
		{name: "answered within grace", grace: 10 * time.Second, cancel: true, answerAfterCancel: true, wantAnswer: true},
		{name: "no grace: aborted at once", cancel: true},
		{name: "no grace, answer arriving: read", partial: true, cancel: true, answerAfterCancel: true, wantAnswer: true},
		{name: "grace over: aborted", grace: 20 * time.Millisecond, cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := &prefillServer{partial: tc.partial, entered: make(chan struct{}), answer: make(chan struct{}),
				aborted: make(chan struct{})}
			hs := httptest.NewServer(ps)
			defer hs.Close()
			// arrived: the engine has the request; partial: its answer began to arrive.
			arrived := ps.entered
			if tc.partial {
				arrived = make(chan struct{})
			}
			firstByte := func() {
				if tc.partial {
					close(arrived)
				}
			}
			ctx, cancel := context.WithCancel(httptrace.WithClientTrace(context.Background(),
				&httptrace.ClientTrace{GotFirstResponseByte: firstByte}))
			defer cancel()
			go func() {
				<-arrived
				if tc.cancel {
					cancel()
				}
				if tc.answerAfterCancel {
					close(ps.answer)
				}
			}()
			body, err := FinishPrefill(ctx, tc.grace, func(ctx context.Context) (string, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, nil)
				resp, err := hs.Client().Do(req)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			})
			switch {
			case tc.wantAnswer && (err != nil || body != prefillAnswer):
				t.Fatalf("answer %q, error %v; want the whole answer", body, err)
			case !tc.wantAnswer && err == nil:
				t.Fatalf("answer %q without error; want the request aborted", body)
			case !tc.wantAnswer && !errors.Is(err, context.Canceled):
				t.Fatalf("error %v; want the aborted request's context.Canceled", err)
			}
			if tc.wantAnswer && tc.cancel && ctx.Err() == nil {
				t.Fatal("the answer came before the cancel")
			}
			if !tc.wantAnswer {
				select {
				case <-ps.aborted:
				case <-time.After(10 * time.Second):
					t.Fatal("the engine did not see the request aborted")
				}
			}
		})
	}
}
