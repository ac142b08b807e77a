package enginetest

import (
	"net/http"
	"sync"
)

// Gate holds the requests an engine's handler gets on one path (Wrap), so that a test
// can act at a chosen point of a request: before the engine sees it, or once the engine
// has computed its answer (a prefill leg's blocks are pinned then) but before any byte of
// the answer leaves. Make one with NewGate.
type Gate struct {
	// Arrived is closed when a request reached the gate; Writing when the engine began
	// to write its answer (WriteHeader or Write), which then waits for Answer.
	Arrived, Writing chan struct{}
	// Admit, once closed, lets requests on to the engine; Answer lets answers out.
	Admit, Answer chan struct{}

	path                  string
	arrivedOnce, wrOnce   sync.Once
	admitOnce, answerOnce sync.Once
}

// NewGate returns a gate on requests to path that holds them before the engine when
// holdRequest is set, and holds their answers when holdAnswer is set.
func NewGate(path string, holdRequest, holdAnswer bool) *Gate {
	g := &Gate{path: path, Arrived: make(chan struct{}), Writing: make(chan struct{}), Admit: make(chan struct{}),
		Answer: make(chan struct{})}
	if !holdRequest {
		g.OpenAdmit()
	}
	if !holdAnswer {
		g.OpenAnswer()
	}
	return g
}

// OpenAdmit lets held requests on to the engine. Safe to call more than once.
func (g *Gate) OpenAdmit() { g.admitOnce.Do(func() { close(g.Admit) }) }

// OpenAnswer lets held answers out. Safe to call more than once.
func (g *Gate) OpenAnswer() { g.answerOnce.Do(func() { close(g.Answer) }) }

// Wrap is the gate in front of h (StartMock's wrap).
func (g *Gate) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != g.path {
			h.ServeHTTP(w, r)
			return
		}
		g.arrivedOnce.Do(func() { close(g.Arrived) })
		<-g.Admit
		h.ServeHTTP(&gatedWriter{ResponseWriter: w, g: g}, r)
	})
}

// gatedWriter holds an answer's first byte until the gate's Answer is open.
type gatedWriter struct {
	http.ResponseWriter
	g *Gate
}

func (w *gatedWriter) hold() {
	w.g.wrOnce.Do(func() { close(w.g.Writing) })
	<-w.g.Answer
}

func (w *gatedWriter) WriteHeader(status int) {
	w.hold()
	w.ResponseWriter.WriteHeader(status)
}

func (w *gatedWriter) Write(b []byte) (int, error) {
	w.hold()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer (Flush).
func (w *gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
