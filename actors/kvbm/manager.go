package kvbm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

// ActorName is the name the block manager actor is spawned under on its member; others
// reach it as PID{Address: <member address>, Id: "kvbm"}.
const ActorName = "kvbm"

// Server is a protocol server over the store (kvbm/resp's RESP2, kvbm/lmserver's lm://):
// Serve accepts on the listener until Close.
type Server interface {
	Serve(net.Listener) error
	Close()
}

// Listener is one protocol the block manager serves: Addr ("host:port"; port 0 picks a
// free one) and the constructor of its server over the store. Scheme names the protocol
// in URLs ("resp", "lm").
type Listener struct {
	Scheme string
	Addr   string
	New    func(*store.Store) Server
	// Ln, when set, is the listener already bound to Addr (bound before the member
	// joins, so that a taken port fails first); Open serves on it and Close closes it.
	Ln net.Listener
}

// RouterClient is the part of a model's Router grain the block manager talks to.
type RouterClient interface {
	PublishInventory(*messages.KvbmInventory) (*messages.EventAck, error)
}

// Config configures a block manager.
type Config struct {
	// NodeID names the node whose engines the block manager serves (the workers'
	// WorkerInfo.node_id); required.
	NodeID string
	// Store configures the block store (its tiers, caps and policy).
	Store store.Config
	// Listeners are the protocols served (none: the store is reachable by no engine).
	Listeners []Listener
	// Routers returns the Router grain client of a model; nil: the inventory is not
	// published (tests, a block manager outside a cluster).
	Routers func(model string) RouterClient
	// PublishInterval is how often the inventory is drained and published (default
	// DefaultPublishInterval).
	PublishInterval time.Duration
	// ServesRemote: the block manager serves engines of other nodes too (its listeners
	// bind a non-loopback address): its blocks are remote-tier hits for them.
	ServesRemote bool
	// Epoch numbers the inventory (KvbmInventory.epoch); 0: the start time in Unix
	// nanoseconds, which the admin API also reads as the start time.
	Epoch uint64
	// FS, when set, is an LMCache fs:// directory kept under a byte cap (janitor mode,
	// kvbm.Janitor): the manager scans it every FS.Interval from Open until Close; its
	// figures are KvbmStatus.fs and the turbine_kvbm_fs_* metrics.
	FS     *store.JanitorConfig
	Logger zerolog.Logger
}

// Defaults of Config.
const (
	DefaultPublishInterval = 100 * time.Millisecond // Config.PublishInterval
	// statusTimeout is what a caller should allow a KvbmStatusRequest (the store's
	// figures are read under its lock, never across a grain call).
	statusTimeout = 2 * time.Second
)

// StatusTimeout is how long a KvbmStatusRequest may take to be answered.
const StatusTimeout = statusTimeout

// Manager is an open block manager: the store and its protocol servers, serving from
// Open until Close. The actor (Props) publishes its inventory and answers its status.
type Manager struct {
	cfg   Config
	st    *store.Store
	addrs map[string]string // scheme -> bound address
	srvs  []Server
	lns   []net.Listener
	set   *metrics.Set
	start time.Time
	jan   *store.Janitor // nil without Config.FS
	// janStop ends the janitor's goroutine; janDone is closed when it has ended.
	janStop context.CancelFunc
	janDone chan struct{}

	// inv numbers the published inventory for the manager's life (every publisher in
	// turn); pubMu is held for a publisher's whole step.
	inv     *Inventory
	pubMu   sync.Mutex
	pubFail publishFailures

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// Open opens the store of cfg, binds every listener and starts its server, and starts
// the fs:// janitor of cfg.FS. Errors: an empty node id, the janitor's configuration or
// a directory it cannot list, the store's (a bad directory, a cap of 0), a listener that
// does not bind (its scheme and address named); nothing stays open on error.
func Open(cfg Config) (*Manager, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("kvbm: empty node id")
	}
	if cfg.PublishInterval <= 0 {
		cfg.PublishInterval = DefaultPublishInterval
	}
	now := time.Now()
	if cfg.Epoch == 0 {
		cfg.Epoch = uint64(now.UnixNano())
	}
	var jan *store.Janitor
	if cfg.FS != nil {
		var err error
		if jan, err = store.NewJanitor(*cfg.FS); err != nil {
			return nil, err
		}
		// A directory that cannot be listed fails here, not silently at each scan.
		if _, err := jan.Scan(); err != nil {
			return nil, err
		}
	}
	st, err := store.Open(cfg.Store)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, st: st, addrs: map[string]string{}, start: now, jan: jan,
		inv: NewInventory(cfg.NodeID, cfg.Epoch, cfg.ServesRemote)}
	for _, l := range cfg.Listeners {
		ln := l.Ln
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", l.Addr); err != nil {
				_ = m.Close()
				return nil, fmt.Errorf("kvbm: %s listener: %w", l.Scheme, err)
			}
		}
		srv := l.New(st)
		m.lns, m.srvs, m.addrs[l.Scheme] = append(m.lns, ln), append(m.srvs, srv), ln.Addr().String()
		m.wg.Add(1)
		go func(scheme string) {
			defer m.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
				cfg.Logger.Debug().Err(err).Str("protocol", scheme).Msg("kvbm server ended")
			}
		}(l.Scheme)
	}
	if jan != nil {
		ctx, cancel := context.WithCancel(context.Background())
		m.janStop, m.janDone = cancel, make(chan struct{})
		go func() {
			defer close(m.janDone)
			_ = jan.Run(ctx)
		}()
	}
	m.set = metrics.NewSet()
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		WriteMetrics(w, cfg.NodeID, st.Stats())
		if jan != nil {
			WriteFSMetrics(w, cfg.NodeID, jan.Stats())
		}
	})
	metrics.RegisterSet(m.set)
	return m, nil
}

// Janitor is the manager's fs:// janitor (nil without Config.FS).
func (m *Manager) Janitor() *store.Janitor { return m.jan }

// Store is the manager's block store.
func (m *Manager) Store() *store.Store { return m.st }

// Addr returns the address the listener of scheme is bound to ("" when it serves no
// such protocol).
func (m *Manager) Addr(scheme string) string { return m.addrs[scheme] }

// URL returns scheme://<bound address> ("" when it serves no such protocol).
func (m *Manager) URL(scheme string) string {
	if a := m.addrs[scheme]; a != "" {
		return scheme + "://" + a
	}
	return ""
}

// Port returns the port the listener of scheme is bound to (0 when none).
func (m *Manager) Port(scheme string) int {
	_, p, err := net.SplitHostPort(m.addrs[scheme])
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Epoch is the manager's inventory epoch.
func (m *Manager) Epoch() uint64 { return m.cfg.Epoch }

// Close stops the servers (their connections end), then closes the store (blocks on
// disk stay) and withdraws the metrics. Idempotent.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		for _, s := range m.srvs {
			s.Close()
		}
		for _, ln := range m.lns {
			_ = ln.Close()
		}
		m.wg.Wait()
		if m.janStop != nil {
			m.janStop()
			<-m.janDone
		}
		if m.set != nil {
			metrics.UnregisterSet(m.set, true)
		}
		m.closeErr = m.st.Close()
	})
	return m.closeErr
}

// Status is the manager's messages.KvbmStatus now (models: those published).
func (m *Manager) Status(models []string) *messages.KvbmStatus {
	out := StatusOf(m.cfg, m.st.Stats(), m.URL("resp"), m.URL("lm"), models)
	if m.jan != nil {
		out.Fs, out.FsDir = FSStatusOf(m.jan.Stats()), m.cfg.FS.Dir
	}
	return out
}

// ServerFuncs adapts a protocol server's methods to Server (whatever its Close returns).
type ServerFuncs struct {
	ServeFn func(net.Listener) error
	CloseFn func()
}

// Serve calls ServeFn.
func (f ServerFuncs) Serve(ln net.Listener) error { return f.ServeFn(ln) }

// Close calls CloseFn.
func (f ServerFuncs) Close() { f.CloseFn() }
