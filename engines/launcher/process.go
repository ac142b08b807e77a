package launcher

import (
	"context"
	"net"
	"strconv"
	"sync"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/messages"
)

// AppendInt appends flag and n to argv when n > 0 (a limit the spec sets).
func AppendInt(argv []string, flag string, n int) []string {
	if n <= 0 {
		return argv
	}
	return append(argv, flag, strconv.Itoa(n))
}

// AppendFloat appends flag and f to argv when f > 0.
func AppendFloat(argv []string, flag string, f float64) []string {
	if f <= 0 {
		return argv
	}
	return append(argv, flag, strconv.FormatFloat(f, 'g', -1, 64))
}

// FreePort is a free TCP port on host, or on every address when host is not one of this
// machine's (the engine binds it there).
func FreePort(host string) (int, error) {
	if p, err := supervise.FreePort(host); err == nil {
		return p, nil
	}
	return supervise.FreePort("")
}

// BootstrapAddr remembers the bootstrap address of the engine a launcher's latest
// Command started, for its Bootstrap method (Bootstrapper). Safe for concurrent use;
// the zero value holds none.
type BootstrapAddr struct {
	mu   sync.Mutex
	addr string // host:port; "" for none
}

// Set records host:port; a port ≤ 0 records none.
func (b *BootstrapAddr) Set(host string, port int) {
	addr := ""
	if port > 0 {
		addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	b.mu.Lock()
	b.addr = addr
	b.mu.Unlock()
}

// Bootstrap returns the recorded address; ok is false when there is none.
func (b *BootstrapAddr) Bootstrap() (host string, port int, ok bool) {
	b.mu.Lock()
	addr := b.addr
	b.mu.Unlock()
	if addr == "" {
		return "", 0, false
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(p)
	return h, n, err == nil
}

// FailedEngine is the engine a launcher's Connect returns when it cannot build a client
// (a malformed base URL): every call fails with Err.
type FailedEngine struct{ Err error }

func (f FailedEngine) Health(context.Context) error { return f.Err }

func (f FailedEngine) Generate(context.Context, string, []uint32, *messages.SamplingParams, func(engines.Chunk) error) error {
	return f.Err
}

func (f FailedEngine) Load(context.Context) (*messages.WorkerLoad, error) { return nil, f.Err }

var _ engines.Engine = FailedEngine{}
