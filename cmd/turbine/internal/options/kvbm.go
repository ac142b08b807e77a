package options

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	kvbmactor "github.com/turbine-llm/turbine/actors/kvbm"
	"github.com/turbine-llm/turbine/engines/launcher"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/kvbm/lmserver"
	"github.com/turbine-llm/turbine/kvbm/resp"
)

// Kvbm are the KV block manager's flags (`turbine kvbm`, and `turbine node --kvbm`,
// `turbine serve --kvbm`; docs/reference.md §9.5).
type Kvbm struct {
	// Enabled: --kvbm, a block manager on this member (node, serve).
	Enabled bool
	// External: --kvbm-external (node): the node's block manager runs on its own
	// (`turbine kvbm --node-id <node>`) at --kvbm-host, --kvbm-resp-port and
	// --kvbm-lm-port; the engines are configured for it, nothing runs here.
	External bool
	// HostBytes and DiskBytes cap the host-memory and disk tiers; DiskDir is the disk
	// tier's directory ("" for none).
	// HostBytes is at least MinKvbmHostBytes; DiskBytes is refused without DiskDir.
	HostBytes, DiskBytes Bytes
	DiskDir              string
	// diskBytesSet: --kvbm-disk-bytes was given (a cap without a directory is an error).
	diskBytesSet bool
	// Host is the address the servers bind (engines of this node reach it on loopback);
	// RESPPort and LMPort their ports: 0 picks a free one, -1 turns the server off.
	Host             string
	RESPPort, LMPort int
	// Policy: "demote", "write-through" or "reuse" (kvbm.ParsePolicy).
	Policy string
	// LMCacheLocalCPU: vLLM's LMCache keeps its own host-memory cache too
	// (LMCACHE_LOCAL_CPU); false sends every chunk to the block manager.
	LMCacheLocalCPU bool
	// FSDir is an LMCache fs:// directory the block manager keeps under FSBytes (janitor
	// mode, kvbm.Janitor; "" for none), scanned every FSScanInterval.
	FSDir          string
	FSBytes        Bytes
	FSScanInterval time.Duration
}

// Defaults of the block manager's flags.
const (
	DefaultKvbmHostBytes = 4 << 30  // --kvbm-host-bytes
	DefaultKvbmDiskBytes = 64 << 30 // --kvbm-disk-bytes (with --kvbm-disk-dir)
	// MinKvbmHostBytes is the smallest --kvbm-host-bytes: 1 MiB, so that the host tier
	// holds at least a few blocks of small models (a block larger than the tier is
	// refused by the store, never cached).
	MinKvbmHostBytes   = 1 << 20
	DefaultKvbmFSBytes = 64 << 30 // --kvbm-fs-bytes (with --kvbm-fs-dir)
	// DefaultKvbmFSScanInterval is --kvbm-fs-scan-interval (kvbm.DefaultJanitorInterval).
	DefaultKvbmFSScanInterval = store.DefaultJanitorInterval
	DefaultKvbmHost           = "127.0.0.1"
	// DefaultKvbmRESPPort is --kvbm-resp-port: redis-server's 6379 plus one, so that a
	// Redis on the same machine keeps its port.
	DefaultKvbmRESPPort = 6380
	// DefaultKvbmLMPort is --kvbm-lm-port (LMCache's lm:// server protocol).
	DefaultKvbmLMPort = 6381
	// LMCacheChunkSize is the chunk size vLLM's LMCache is told (LMCache's default, in
	// tokens).
	LMCacheChunkSize = 256
)

// DefaultKvbm returns the block manager's defaults (off).
func DefaultKvbm() Kvbm {
	return Kvbm{HostBytes: DefaultKvbmHostBytes, DiskBytes: DefaultKvbmDiskBytes, Host: DefaultKvbmHost,
		RESPPort: DefaultKvbmRESPPort, LMPort: DefaultKvbmLMPort, Policy: store.PolicyDemote.String(),
		FSBytes: DefaultKvbmFSBytes, FSScanInterval: DefaultKvbmFSScanInterval}
}

// Flags registers the block manager's flags on fs; with enable, also --kvbm (and, with
// external, --kvbm-external).
func (o *Kvbm) Flags(fs *flag.FlagSet, enable, external bool) {
	if enable {
		fs.BoolVar(&o.Enabled, "kvbm", o.Enabled, "run a KV block manager in this process: the engines offload KV blocks to its host memory and disk tiers (docs/reference.md §9.5)")
	}
	if external {
		fs.BoolVar(&o.External, "kvbm-external", o.External, "the node's block manager runs on its own (turbine kvbm --node-id <this node>) at --kvbm-host and its ports: configure the engines for it")
	}
	fs.Var(&o.HostBytes, "kvbm-host-bytes", "host-memory tier cap of the block manager (bytes; 4GiB, 512MiB, 10GB style)")
	fs.StringVar(&o.DiskDir, "kvbm-disk-dir", o.DiskDir, "directory of the block manager's disk tier (\"\": no disk tier); a restart re-reads its blocks")
	fs.Var(markSet{&o.DiskBytes, &o.diskBytesSet}, "kvbm-disk-bytes", "disk tier cap (bytes; 64GiB style) with --kvbm-disk-dir")
	fs.StringVar(&o.Host, "kvbm-host", o.Host, "address the block manager's servers bind (a non-loopback one serves other nodes too)")
	fs.IntVar(&o.RESPPort, "kvbm-resp-port", o.RESPPort, "port of the block manager's RESP server (LMCache redis:// and resp://, the mock engine, redis-cli); 0 picks a free one, -1 turns it off")
	fs.IntVar(&o.LMPort, "kvbm-lm-port", o.LMPort, "port of the block manager's LMCache lm:// server; 0 picks a free one, -1 turns it off")
	fs.StringVar(&o.Policy, "kvbm-policy", o.Policy, "when blocks go to disk: demote (on eviction from host memory), write-through (every put), reuse (on eviction, only blocks read again)")
	fs.StringVar(&o.FSDir, "kvbm-fs-dir", o.FSDir, "an LMCache fs:// directory the block manager keeps under --kvbm-fs-bytes, deleting the least recently written .data files first (\"\": none)")
	fs.Var(&o.FSBytes, "kvbm-fs-bytes", "cap of the .data files in --kvbm-fs-dir (bytes; 64GiB style)")
	fs.DurationVar(&o.FSScanInterval, "kvbm-fs-scan-interval", o.FSScanInterval, "how often --kvbm-fs-dir is scanned")
	fs.BoolVar(&o.LMCacheLocalCPU, "kvbm-lmcache-local-cpu", o.LMCacheLocalCPU, "vLLM engines keep LMCache's own host-memory cache as well (LMCACHE_LOCAL_CPU); false sends every chunk to the block manager")
}

// Validate checks the block manager's flags (whether or not it is enabled); errors name
// the flag.
func (o *Kvbm) Validate() error {
	switch {
	case o.Enabled && o.External:
		return errors.New("--kvbm and --kvbm-external: choose one (a block manager here, or one on its own)")
	case o.HostBytes < MinKvbmHostBytes:
		return fmt.Errorf("--kvbm-host-bytes %v: must be at least %v", o.HostBytes, Bytes(MinKvbmHostBytes))
	case o.DiskDir == "" && o.diskBytesSet:
		return fmt.Errorf("--kvbm-disk-bytes %v needs --kvbm-disk-dir (the disk tier's directory)", o.DiskBytes)
	case o.DiskDir != "" && o.DiskBytes <= 0:
		return fmt.Errorf("--kvbm-disk-bytes %v: must be > 0 with --kvbm-disk-dir", o.DiskBytes)
	case o.RESPPort < -1 || o.RESPPort > 65535:
		return fmt.Errorf("--kvbm-resp-port %d: want 0..65535, or -1 for off", o.RESPPort)
	case o.LMPort < -1 || o.LMPort > 65535:
		return fmt.Errorf("--kvbm-lm-port %d: want 0..65535, or -1 for off", o.LMPort)
	case o.RESPPort != 0 && o.RESPPort == o.LMPort && o.RESPPort != -1:
		return fmt.Errorf("--kvbm-resp-port and --kvbm-lm-port are both %d", o.RESPPort)
	case o.Host == "":
		return errors.New("--kvbm-host: empty")
	case o.FSDir != "" && !o.Enabled:
		return errors.New("--kvbm-fs-dir needs --kvbm (the block manager keeps the directory; with --kvbm-external, give it to turbine kvbm)")
	case o.FSDir != "" && o.FSBytes <= 0:
		return fmt.Errorf("--kvbm-fs-bytes %v: must be > 0 with --kvbm-fs-dir", o.FSBytes)
	case o.FSDir != "" && o.FSScanInterval <= 0:
		return fmt.Errorf("--kvbm-fs-scan-interval %v: must be > 0 with --kvbm-fs-dir", o.FSScanInterval)
	case o.FSDir != "" && o.DiskDir != "" && filepath.Clean(o.FSDir) == filepath.Clean(o.DiskDir):
		return fmt.Errorf("--kvbm-fs-dir and --kvbm-disk-dir are both %s: give LMCache's directory and the disk tier one each", o.FSDir)
	case o.External && (o.RESPPort <= 0 && o.LMPort <= 0):
		return errors.New("--kvbm-external needs the block manager's --kvbm-resp-port or --kvbm-lm-port (not 0 or -1)")
	}
	if _, err := store.ParsePolicy(o.Policy); err != nil {
		return fmt.Errorf("--kvbm-policy: %w", err)
	}
	return nil
}

// ManagerConfig is the block manager's configuration for node, its inventory published
// to routers (nil: not published).
func (o *Kvbm) ManagerConfig(node string, routers func(string) kvbmactor.RouterClient, log zerolog.Logger) kvbmactor.Config {
	policy, _ := store.ParsePolicy(o.Policy) // Validate checked it
	cfg := kvbmactor.Config{NodeID: node, Routers: routers, Logger: log,
		Store:        store.Config{HostBytes: int64(o.HostBytes), DiskDir: o.DiskDir, DiskBytes: int64(o.DiskBytes), Policy: policy},
		ServesRemote: !isLoopback(o.Host)}
	if o.FSDir != "" {
		cfg.FS = &store.JanitorConfig{Dir: o.FSDir, MaxBytes: int64(o.FSBytes), Interval: o.FSScanInterval}
	}
	if o.RESPPort >= 0 {
		cfg.Listeners = append(cfg.Listeners, kvbmactor.Listener{Scheme: "resp", Addr: net.JoinHostPort(o.Host, strconv.Itoa(o.RESPPort)),
			New: func(st *store.Store) kvbmactor.Server {
				s := resp.New(st, resp.Options{Logger: log})
				return kvbmactor.ServerFuncs{ServeFn: s.Serve, CloseFn: func() { _ = s.Close() }}
			}})
	}
	if o.LMPort >= 0 {
		cfg.Listeners = append(cfg.Listeners, kvbmactor.Listener{Scheme: "lm", Addr: net.JoinHostPort(o.Host, strconv.Itoa(o.LMPort)),
			New: func(st *store.Store) kvbmactor.Server {
				s := lmserver.New(st, lmserver.Options{Logger: log})
				return kvbmactor.ServerFuncs{ServeFn: s.Serve, CloseFn: func() { _ = s.Close() }}
			}})
	}
	return cfg
}

// markSet is a Bytes flag that records that it was given.
type markSet struct {
	b   *Bytes
	set *bool
}

func (m markSet) String() string {
	if m.b == nil {
		return ""
	}
	return m.b.String()
}

func (m markSet) Set(s string) error {
	if err := m.b.Set(s); err != nil {
		return err
	}
	*m.set = true
	return nil
}

// Bind binds cfg's listeners now (Listener.Ln), before the cluster member joins, so that
// a taken port fails first. release closes them; a manager opened over them closes them
// itself. Errors name the flag: "--kvbm-resp-port 6380: listen tcp ...: address already
// in use"; nothing stays bound on error.
func (o *Kvbm) Bind(cfg *kvbmactor.Config) (release func(), err error) {
	release = func() {
		for _, l := range cfg.Listeners {
			if l.Ln != nil {
				_ = l.Ln.Close()
			}
		}
	}
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		if l.Ln != nil {
			continue
		}
		flagName, port := "--kvbm-resp-port", o.RESPPort
		if l.Scheme == "lm" {
			flagName, port = "--kvbm-lm-port", o.LMPort
		}
		if l.Ln, err = net.Listen("tcp", l.Addr); err != nil {
			release()
			return nil, fmt.Errorf("--kvbm-host %s %s %d: %w", o.Host, flagName, port, err)
		}
	}
	return release, nil
}

// OpenError names the flag behind an error of kvbmactor.Open over this configuration: a
// disk directory that cannot be made or read is "--kvbm-disk-dir <dir>: <cause>" (once,
// without the store's prefixes); other errors are returned as they are.
func (o *Kvbm) OpenError(err error) error {
	var pe *fs.PathError
	if err != nil && o.DiskDir != "" && errors.As(err, &pe) && strings.Contains(err.Error(), "disk dir") {
		return fmt.Errorf("--kvbm-disk-dir %s: %v", o.DiskDir, pe.Err)
	}
	return err
}

// isLoopback reports whether host names the loopback interface only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Endpoints are the URLs of a node's block manager the engines are given: RESP
// ("resp://127.0.0.1:6380") and lm:// ("" when off).
type Endpoints struct{ RESP, LM string }

// ExternalEndpoints are the endpoints of a block manager on its own (--kvbm-external),
// reached at --kvbm-host (a wildcard bind address reads as loopback).
func (o *Kvbm) ExternalEndpoints() Endpoints {
	host := o.Host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	var e Endpoints
	if o.RESPPort > 0 {
		e.RESP = "resp://" + net.JoinHostPort(host, strconv.Itoa(o.RESPPort))
	}
	if o.LMPort > 0 {
		e.LM = "lm://" + net.JoinHostPort(host, strconv.Itoa(o.LMPort))
	}
	return e
}

// ManagerEndpoints are the endpoints of an open block manager (a wildcard bind address
// reads as loopback).
func ManagerEndpoints(m *kvbmactor.Manager) Endpoints {
	fix := func(u string) string {
		for _, w := range []string{"0.0.0.0", "[::]"} {
			u = strings.Replace(u, "://"+w+":", "://127.0.0.1:", 1)
		}
		return u
	}
	return Endpoints{RESP: fix(m.URL("resp")), LM: fix(m.URL("lm"))}
}

// LauncherKVBM is the launcher's description of the block manager at e for a real engine
// (vLLM's LMCache connector): lm:// when served, else resp://; nil when e has neither.
func (o *Kvbm) LauncherKVBM(e Endpoints) *launcher.KVBM {
	url := e.LM
	if url == "" {
		url = e.RESP
	}
	if url == "" {
		return nil
	}
	return &launcher.KVBM{RemoteURL: url, ChunkSize: LMCacheChunkSize, LocalCPU: o.LMCacheLocalCPU}
}

// Bytes is a byte count flag: a whole number of bytes with an optional unit, decimal (kB,
// MB, GB, TB: powers of 1000) or binary (KiB, MiB, GiB, TiB: powers of 1024), case
// insensitive, an optional space between ("4GiB", "512 MiB", "1.5GB", "1048576").
type Bytes int64

// String renders b in the largest binary unit that divides it ("4GiB"), else in bytes.
func (b Bytes) String() string {
	units := []string{"TiB", "GiB", "MiB", "KiB"}
	for i, u := range units {
		shift := uint(10 * (len(units) - i))
		if b > 0 && b%(1<<shift) == 0 {
			return strconv.FormatInt(int64(b)>>shift, 10) + u
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set parses s (ParseBytes).
func (b *Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = n
	return nil
}

// byteUnits are the units ParseBytes reads, lower case.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ParseBytes reads a byte count (Bytes). Errors: no number, an unknown unit, a negative
// or fractional byte count, or more than 2^63-1 bytes.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("byte count %q: want a number with an optional unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	if !strings.Contains(num, ".") && mult == 1 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("byte count %q: out of range", s)
		}
		return Bytes(n), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("byte count %q: bad number", s)
	}
	v := f * mult
	if v >= math.MaxInt64 || v != math.Trunc(v) {
		return 0, fmt.Errorf("byte count %q: want a whole number of bytes below 2^63", s)
	}
	return Bytes(v), nil
}

// kvbmRouterTimeout bounds a block manager's inventory call to a Router grain.
const kvbmRouterTimeout = 2 * time.Second

// KvbmRouterTimeout is kvbmRouterTimeout, for the commands that wire the routers.
func KvbmRouterTimeout() time.Duration { return kvbmRouterTimeout }
