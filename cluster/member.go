// Package cluster starts a Turbine cluster member: the protoactor actor system, remoting,
// the discovery provider (in-process, or Consul) and the identity lookup, with the
// hardening the library lacks (docs/actor-library.md, by section):
//
//   - StartMember's panics become errors (§1); the library's slog output goes through
//     zerolog (§14, log.go);
//   - Turbine's own Consul provider (§3, consul.go): backoff, re-registration after an
//     agent restart, a watch that stops, and a member list that a Consul outage cannot
//     empty (membership.go);
//   - gRPC (grpc.go): message-size limits raised (§5), messages of unlinked protobuf
//     types dropped and handler panics recovered instead of crashing the process (§4),
//     blocking dials bounded in time (§6); mutual TLS between members when Config.TLS
//     is set (tls.go, docs/tls.md);
//   - an identity lookup with a bounded activation request that keeps one activation per
//     grain (§7, lookup.go), and a mailbox that puts named grain methods first (§10,
//     mailbox.go);
//   - a zombie watchdog that closes Member.Lost when the cluster has dropped the member
//     for good (§2, watchdog.go); the owner then starts a new member, which gets a new id.
package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	testprovider "github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
)

// Config describes one member. A zero field takes its default (defaults.go).
type Config struct {
	// Name is the cluster name (default "turbine"); members with different names never
	// see each other. With Consul it is the service name.
	Name string
	// Host is the interface the member's remoting (gRPC) listener binds (default
	// 127.0.0.1); Port its port, 0 for a free one.
	Host string
	Port int
	// AdvertiseHost is the host other members dial (default Host). Required when Host
	// binds every interface (0.0.0.0 or ::).
	AdvertiseHost string
	// Discovery: "local" (default; in-process: the members of this process see each
	// other) or "consul://HOST[:PORT]" (a Consul agent's HTTP API; port 8500 by default).
	// See ParseDiscovery.
	Discovery string
	// Consul configures the Consul provider; ignored for local discovery.
	Consul ConsulOptions
	// TLS turns on mutual TLS between members' remoting (tls.go); zero: plaintext.
	TLS TLS
	// MaxMessageBytes caps one gRPC message — a batch of actor messages — on both the
	// server and the dial side (default 64 MiB).
	MaxMessageBytes int
	// WatchdogInterval is how often the zombie watchdog looks at the member (default 1 s).
	WatchdogInterval time.Duration
	// Kinds are the grain kinds this member hosts.
	Kinds []*pcluster.Kind
	// Logger receives the member's logs and the actor library's (at warn level and above).
	Logger zerolog.Logger
}

// Member is a started cluster member.
type Member struct {
	System  *actor.ActorSystem
	Cluster *pcluster.Cluster

	log      zerolog.Logger
	consul   *consulProvider // nil for local discovery
	watchdog *watchdog
	sub      *eventstream.Subscription
	once     sync.Once
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

// settings is a Config with defaults applied and checked: what Start builds from.
type settings struct {
	Config
	discovery Discovery
	bindHost  string // as protoactor's remote wants it: IPv6 in brackets
	advertise string // "host:port" when other members must dial something else than the listener's address
}

// resolve applies defaults to cfg and checks it; errors are *OptionError or discovery
// errors naming the value.
func resolve(cfg Config) (settings, error) {
	s := settings{Config: cfg}
	if s.Name == "" {
		s.Name = DefaultName
	}
	if s.Host == "" {
		s.Host = DefaultHost
	}
	if s.MaxMessageBytes == 0 {
		s.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if s.WatchdogInterval == 0 {
		s.WatchdogInterval = DefaultWatchdogInterval
	}
	switch {
	case s.Port < 0 || s.Port > 65535:
		return s, &OptionError{"Port", s.Port, "must be 0-65535 (0: a free port)"}
	case s.MaxMessageBytes < 0:
		return s, &OptionError{"MaxMessageBytes", s.MaxMessageBytes, "must be positive"}
	case s.WatchdogInterval < 0:
		return s, &OptionError{"WatchdogInterval", s.WatchdogInterval, "must be positive"}
	case unspecifiedHost(s.Host) && s.AdvertiseHost == "":
		return s, &OptionError{"AdvertiseHost", `""`, fmt.Sprintf("required when Host (%s) binds every interface: other members need an address to dial", s.Host)}
	case unspecifiedHost(s.AdvertiseHost):
		return s, &OptionError{"AdvertiseHost", s.AdvertiseHost, "must be an address other members can dial"}
	}
	d, err := ParseDiscovery(s.Discovery)
	if err != nil {
		return s, err
	}
	s.discovery = d
	if d.Kind == DiscoveryConsul {
		if err := s.Consul.Validate(); err != nil {
			return s, err
		}
	}
	s.bindHost = bracketIPv6(s.Host)
	if s.AdvertiseHost == "" {
		s.AdvertiseHost = s.Host
	}
	return s, nil
}

func unspecifiedHost(h string) bool {
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsUnspecified()
}

func bracketIPv6(h string) string {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		return "[" + h + "]"
	}
	return h
}

// Start starts a member. It returns an error (never panics) when the configuration is
// wrong or the listener or the provider cannot start. With Consul, Start does not wait for
// the agent: registration is retried in the background.
func Start(cfg Config) (m *Member, err error) {
	s, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	log := s.Logger.With().Str("component", "cluster").Logger()
	tr, err := newTransport(s.TLS, time.Now(), log)
	if err != nil {
		return nil, err
	}
	var provider pcluster.ClusterProvider
	var consul *consulProvider
	healthy := func() bool { return true }
	var alive func() map[string]bool
	var lapse func() (time.Time, time.Time)
	if s.discovery.Kind == DiscoveryConsul {
		if consul, err = newConsulProvider(s.discovery.Address, s.Consul, log); err != nil {
			return nil, err
		}
		provider, healthy, alive, lapse = consul, consul.healthy, consul.alive, consul.lapse
	} else {
		provider = testprovider.NewTestProvider(sharedLocalAgent())
	}
	if s.AdvertiseHost != s.Host {
		if s.Port == 0 {
			if s.Port, err = freePort(s.bindHost); err != nil {
				return nil, err
			}
		}
		s.advertise = net.JoinHostPort(s.AdvertiseHost, strconv.Itoa(s.Port))
	}

	libLog := s.Logger.With().Str("component", "protoactor").Logger()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zerologHandler{log: libLog})
	}))
	var pauseLimit time.Duration // in-process discovery: no TTL, and every member pauses with the process
	if consul != nil {
		pauseLimit = s.Consul.withDefaults().TTL + pauseMargin
	}
	wd := newWatchdog(system.ID, healthy, alive, lapse, s.WatchdogInterval, pauseLimit, log)
	remoteOpts := remoteOptions(s.MaxMessageBytes, newGRPCGuard(log, wd.onBlockedBy), tr)
	if s.advertise != "" {
		remoteOpts = append(remoteOpts, remote.WithAdvertisedHost(s.advertise))
	}
	remoteCfg := remote.Configure(s.bindHost, s.Port, remoteOpts...)
	remoteCfg.MaxRetryCount = peerConnectAttempts
	clusterCfg := pcluster.Configure(s.Name, provider, newIdentityLookup(activationTimeout), remoteCfg,
		pcluster.WithKinds(s.Kinds...), pcluster.WithClusterContextProducer(newGrainContext))
	c := pcluster.New(system, clusterCfg)
	wd.cluster = c
	sub := system.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pcluster.ClusterTopology); ok {
			wd.onTopology(t)
		}
	})
	defer func() {
		if r := recover(); r != nil {
			abandon(c, consul)
			err = fmt.Errorf("cluster: start member on %s:%d: %v", s.Host, s.Port, r)
		}
	}()
	c.StartMember()
	wd.start()
	m = &Member{System: system, Cluster: c, log: log, consul: consul, watchdog: wd, sub: sub}
	log.Info().Str("member", m.ID()).Str("address", system.Address()).Str("discovery", s.discovery.String()).
		Msg("cluster member started")
	return m, nil
}

// abandon releases what a failed StartMember may have started.
func abandon(c *pcluster.Cluster, consul *consulProvider) {
	defer func() { _ = recover() }() // the remote may not have got as far as its server
	if consul != nil {
		consul.halt()
	}
	c.ActorSystem.Shutdown()
	if c.Remote != nil {
		c.Remote.Shutdown(false)
	}
}

// freePort asks the kernel for a free TCP port on host. The port is free now, not
// reserved: another process may take it before the member listens (Start then fails).
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(strings.Trim(host, "[]"), "0"))
	if err != nil {
		return 0, fmt.Errorf("cluster: find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ID is the member id (the actor system's id): unique to this start of the member.
func (m *Member) ID() string { return m.System.ID }

// Address is the member's advertised remoting address, "host:port".
func (m *Member) Address() string { return m.System.Address() }

// Lost is closed when the watchdog finds that the cluster has dropped this member for
// good (the signs: zombieCheck). A lost member cannot rejoin, since the library never
// lets a blocked id back (docs/actor-library.md §2): stop it and start a new one, which
// gets a new id. LostReason says why.
func (m *Member) Lost() <-chan struct{} { return m.watchdog.lost }

// LostReason says why Lost was closed; "" while it is not.
func (m *Member) LostReason() string {
	select {
	case <-m.watchdog.lost:
		return m.watchdog.reason
	default:
		return ""
	}
}

// Stop leaves the cluster gracefully: with Consul, the member deregisters first, so that
// the others see it leave at once; then the actor system shuts down (which takes about
// two seconds, docs/actor-library.md §1). A lost member leaves at once instead
// (leaveLost). Safe to call more than once.
func (m *Member) Stop() {
	m.once.Do(func() {
		m.watchdog.halt()
		if m.consul != nil {
			if err := m.consul.DeregisterMember(); err != nil {
				m.log.Warn().Err(err).Msg("leaving without deregistering; the member's TTL check will expire")
			}
		}
		if m.LostReason() != "" {
			m.leaveLost()
		} else {
			m.Cluster.Shutdown(true)
		}
		m.System.EventStream.Unsubscribe(m.sub)
		m.log.Info().Str("member", m.ID()).Msg("cluster member stopped")
	})
}

// leaveLost stops a member the cluster has dropped without protoactor's graceful leave,
// which would hold its replacement back for 2 to 6 s: a fixed 2 s for handing its grains
// over, then a wait for every endpoint writer, each of them still dialling dead peers
// 2 s apart (docs/actor-library.md §2, §6). Nobody waits for what a dropped member hands
// over: the others have blocked its id. Its listener closes at once (a fixed member port
// is free for the new member); its endpoint writers are stopped in the background, which
// ends within their dialling attempts.
func (m *Member) leaveLost() {
	c := m.Cluster
	c.ActorSystem.Shutdown()
	if m.consul == nil { // with Consul, Stop's deregistration has halted the provider
		_ = c.Config.ClusterProvider.Shutdown(true)
	}
	c.IdentityLookup.Shutdown()
	c.Gossip.Shutdown()
	c.Remote.Shutdown(false)
	go func() {
		// The server is stopped: this stops the endpoint writers. It can find an inbound
		// stream's channel closed and not yet forgotten, and send on it (protoactor's
		// endpoint reader), a panic in a member already gone.
		defer func() { _ = recover() }()
		c.Remote.Shutdown(true)
	}()
}
