// Package cluster starts a Turbine cluster member: the protoactor actor system, remoting,
// the discovery provider and the identity lookup, with the hardening the library lacks
// (REFERENCE §13): StartMember's panics become errors, and the library's slog output goes
// through zerolog.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	testprovider "github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
)

// Config describes one member.
type Config struct {
	// Name is the cluster name; members with different names never see each other.
	Name string
	// Host and Port of the member's remoting (gRPC) listener; port 0 picks a free one.
	Host string
	Port int
	// Discovery: "local" (in-process provider: every member of this process sees the
	// others). Other providers are added by later work.
	Discovery string
	// Kinds are the grain kinds this member hosts.
	Kinds []*pcluster.Kind
	// Logger receives the actor library's logs (at warn level and above).
	Logger zerolog.Logger
}

// Member is a started cluster member.
type Member struct {
	System  *actor.ActorSystem
	Cluster *pcluster.Cluster
	once    sync.Once
}

var (
	localAgentOnce sync.Once
	localAgent     *testprovider.InMemAgent
)

// sharedLocalAgent is the in-process discovery shared by all members of this process.
func sharedLocalAgent() *testprovider.InMemAgent {
	localAgentOnce.Do(func() { localAgent = testprovider.NewInMemAgent() })
	return localAgent
}

// Start starts a member. It returns an error (never panics) when the listener or the
// provider cannot start.
func Start(cfg Config) (m *Member, err error) {
	if cfg.Name == "" {
		cfg.Name = "turbine"
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	var provider pcluster.ClusterProvider
	switch cfg.Discovery {
	case "", "local":
		provider = testprovider.NewTestProvider(sharedLocalAgent())
	default:
		return nil, fmt.Errorf("cluster: unknown discovery %q (want \"local\")", cfg.Discovery)
	}
	logger := cfg.Logger
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zerologHandler{log: logger.With().Str("component", "protoactor").Logger()})
	}))
	remoteCfg := remote.Configure(cfg.Host, cfg.Port)
	clusterCfg := pcluster.Configure(cfg.Name, provider, disthash.New(), remoteCfg,
		pcluster.WithKinds(cfg.Kinds...))
	c := pcluster.New(system, clusterCfg)
	defer func() {
		if r := recover(); r != nil {
			system.Shutdown()
			err = fmt.Errorf("cluster: start member on %s:%d: %v", cfg.Host, cfg.Port, r)
		}
	}()
	c.StartMember()
	return &Member{System: system, Cluster: c}, nil
}

// Stop leaves the cluster gracefully. Safe to call more than once.
func (m *Member) Stop() {
	m.once.Do(func() { m.Cluster.Shutdown(true) })
}

// zerologHandler adapts slog records from the actor library to zerolog; it keeps warnings
// and errors only, since the library is chatty at info level.
type zerologHandler struct {
	log   zerolog.Logger
	attrs []slog.Attr
}

func (h zerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h zerologHandler) Handle(_ context.Context, r slog.Record) error {
	var ev *zerolog.Event
	if r.Level >= slog.LevelError {
		ev = h.log.Error()
	} else {
		ev = h.log.Warn()
	}
	for _, a := range h.attrs {
		ev = ev.Str(a.Key, a.Value.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Str(a.Key, a.Value.String())
		return true
	})
	ev.Msg(strings.TrimSpace(r.Message))
	return nil
}

func (h zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return zerologHandler{log: h.log, attrs: append(append([]slog.Attr{}, h.attrs...), attrs...)}
}

func (h zerologHandler) WithGroup(string) slog.Handler { return h }
