package kvbm

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/kv"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/")

// fakeRouter records every batch on got; while needDump holds tokens, a batch is
// answered need_dump (one token each).
type fakeRouter struct {
	got      chan *messages.KvbmInventory
	needDump chan struct{}
}

func (f fakeRouter) PublishInventory(m *messages.KvbmInventory) (*messages.EventAck, error) {
	// The answer is decided before the batch is handed to the test, so a token the test
	// puts in after reading this batch is for the next one.
	ack := &messages.EventAck{}
	select {
	case <-f.needDump:
		ack.NeedDump = true
	default:
	}
	f.got <- m
	return ack, nil
}

// next waits for the next batch (a publication is a timer event: no sleep to wait for).
func (f fakeRouter) next(t *testing.T) *messages.KvbmInventory {
	t.Helper()
	select {
	case m := <-f.got:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no inventory batch published within 5 s")
		return nil
	}
}

func hashes(m *messages.KvbmInventory) []uint64 {
	var out []uint64
	for _, c := range m.Changes {
		out = append(out, c.SeqHashes...)
	}
	return out
}

// startManager opens a manager for node n1 publishing to rt every millisecond, spawned
// in a fresh actor system; the system is stopped when the test ends.
func startManager(t *testing.T, rt RouterClient, listeners ...Listener) (*Manager, *actor.RootContext, *actor.PID) {
	t.Helper()
	m, err := Open(Config{NodeID: "n1", Store: store.Config{HostBytes: 1 << 20}, Listeners: listeners,
		Routers: func(string) RouterClient { return rt }, PublishInterval: time.Millisecond, Epoch: 42})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid, err := sys.Root.SpawnNamed(m.Props(), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.PoisonFuture(pid).Wait(); sys.Shutdown() })
	return m, sys.Root, pid
}

// TestActorPublishes: blocks put into the store reach the model's router, numbered, the
// first batch a snapshot; a need_dump answer makes the next batch a snapshot of all the
// model holds.
func TestActorPublishes(t *testing.T) {
	rt := fakeRouter{got: make(chan *messages.KvbmInventory, 64), needDump: make(chan struct{}, 1)}
	m, _, _ := startManager(t, rt)
	st := m.Store()
	if err := st.Put(store.BlockKey("m", 1), nil, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	first := rt.next(t)
	if first.Model != "m" || first.NodeId != "n1" || first.Epoch != 42 || first.Seq != 1 || !first.Snapshot {
		t.Fatalf("first batch %v, want m's snapshot #1 of n1 in epoch 42", first)
	}
	if err := st.Put("lmcache@chunk", nil, []byte("x"), 0); err != nil { // not published
		t.Fatal(err)
	}
	rt.needDump <- struct{}{}
	if err := st.Put(store.BlockKey("m", 2), nil, []byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	second := rt.next(t)
	if second.Seq != 2 || second.Snapshot || len(hashes(second)) != 1 || hashes(second)[0] != 2 ||
		second.Changes[0].Tier != messages.KvTier_KV_TIER_HOST {
		t.Fatalf("second batch %v, want #2 host+[2]", second)
	}
	third := rt.next(t) // answered need_dump: a snapshot follows
	if third.Seq != 3 || !third.Snapshot || len(hashes(third)) != 2 {
		t.Fatalf("after need_dump: %v, want snapshot #3 of both blocks", third)
	}
}

// TestMemberActorsShareTheManager: an actor of MemberProps leaves the manager serving
// when it stops, and the next member's actor goes on with the same numbering, starting
// with a snapshot for its routers (which may know nothing of the node), so a router that
// heard the first actor accepts it.
func TestMemberActorsShareTheManager(t *testing.T) {
	closed := make(chan struct{})
	srv := ServerFuncs{ServeFn: func(ln net.Listener) error {
		<-closed
		return net.ErrClosed
	}, CloseFn: func() { close(closed) }}
	serving := func(when string) {
		t.Helper()
		select {
		case <-closed:
			t.Fatalf("the manager's server was closed %s", when)
		default:
		}
	}
	m, err := Open(Config{NodeID: "n1", Store: store.Config{HostBytes: 1 << 20}, PublishInterval: time.Millisecond, Epoch: 42,
		Listeners: []Listener{{Scheme: "resp", Addr: "127.0.0.1:0", New: func(*store.Store) Server { return srv }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	// A router's tier index, fed every batch either member's actor sends.
	idx := kv.NewTierIndex()
	apply := func(b *messages.KvbmInventory) {
		t.Helper()
		inv := kv.Inventory{Epoch: b.Epoch, Seq: b.Seq, Snapshot: b.Snapshot}
		for _, c := range b.Changes {
			inv.Changes = append(inv.Changes, kv.TierChange{Tier: kv.TierHost, Removed: c.Removed, SeqHashes: c.SeqHashes})
		}
		if idx.Apply("n1", inv) {
			t.Fatalf("the router asked for a snapshot after batch %v", b)
		}
	}
	if err := m.Store().Put(store.BlockKey("m", 1), nil, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	rt1 := fakeRouter{got: make(chan *messages.KvbmInventory, 64), needDump: make(chan struct{})}
	pid, err := sys.Root.SpawnNamed(m.MemberProps(func(string) RouterClient { return rt1 }), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	b := rt1.next(t)
	if b.Seq != 1 || !b.Snapshot || b.Epoch != 42 || !slices.Equal(hashes(b), []uint64{1}) {
		t.Fatalf("first member's batch %v, want snapshot #1 of [1] in epoch 42", b)
	}
	apply(b)
	if err := m.Store().Put(store.BlockKey("m", 4), nil, []byte("d"), 0); err != nil {
		t.Fatal(err)
	}
	b = rt1.next(t)
	if b.Seq != 2 || b.Snapshot || !slices.Equal(hashes(b), []uint64{4}) {
		t.Fatalf("first member's second batch %v, want #2 host+[4]", b)
	}
	apply(b)
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	// The manager still serves: its store takes blocks, its server answers.
	if err := m.Store().Put(store.BlockKey("m", 2), nil, []byte("b"), 0); err != nil {
		t.Fatalf("the store after the member's actor stopped: %v", err)
	}
	serving("when the first member's actor stopped")

	// The same router (rt2 stands for the grain the first member reached, now reached
	// from the new member) takes the new member's snapshot and what follows.
	rt2 := fakeRouter{got: make(chan *messages.KvbmInventory, 64), needDump: make(chan struct{})}
	pid, err = sys.Root.SpawnNamed(m.MemberProps(func(string) RouterClient { return rt2 }), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	b = rt2.next(t)
	if b.Seq != 3 || !b.Snapshot || len(hashes(b)) != 3 {
		t.Fatalf("second member's first batch %v, want snapshot #3 of the three blocks", b)
	}
	apply(b)
	if err := m.Store().Put(store.BlockKey("m", 3), nil, []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	b = rt2.next(t)
	if b.Seq != 4 || b.Snapshot || !slices.Equal(hashes(b), []uint64{3}) {
		t.Fatalf("second member's next batch %v, want #4 host+[3]", b)
	}
	apply(b)
	for _, h := range []uint64{1, 2, 3, 4} {
		if idx.Tiers("n1", h) == 0 {
			t.Errorf("the router's index lacks block %d after both members' batches", h)
		}
	}
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	serving("when the second member's actor stopped")
}

// TestActorStatus: KvbmStatusRequest answers the node, epoch, policy, the servers'
// addresses, the tiers and the models published; stopping the actor closes the servers.
func TestActorStatus(t *testing.T) {
	rt := fakeRouter{got: make(chan *messages.KvbmInventory, 64), needDump: make(chan struct{})}
	closed := make(chan struct{})
	srv := ServerFuncs{ServeFn: func(ln net.Listener) error {
		<-closed
		return net.ErrClosed
	}, CloseFn: func() { close(closed) }}
	m, root, pid := startManager(t, rt, Listener{Scheme: "resp", Addr: "127.0.0.1:0", New: func(*store.Store) Server { return srv }})
	if err := m.Store().Put(store.BlockKey("qwen", 7), nil, []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	rt.next(t)
	res, err := root.RequestFuture(pid, &messages.KvbmStatusRequest{}, StatusTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, ok := res.(*messages.KvbmStatus)
	switch {
	case !ok:
		t.Fatalf("answer %T, want *messages.KvbmStatus", res)
	case st.NodeId != "n1" || st.Epoch != 42 || st.Policy != "demote" || st.LmAddress != "":
		t.Fatalf("status %v", st)
	case st.RespAddress != "resp://"+m.Addr("resp") || m.Port("resp") == 0:
		t.Fatalf("resp address %q, bound %q", st.RespAddress, m.Addr("resp"))
	case len(st.Tiers) != 1 || st.Tiers[0].Tier != messages.KvTier_KV_TIER_HOST || st.Tiers[0].CapacityBytes != 1<<20:
		t.Fatalf("tiers %v, want the host tier of 1 MiB (no disk tier configured)", st.Tiers)
	case len(st.Models) != 1 || st.Models[0] != "qwen":
		t.Fatalf("models %v, want [qwen]", st.Models)
	}
	if err := root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	default:
		t.Fatal("the server was not closed with the actor")
	}
	if err := m.Store().Put("k", nil, []byte("v"), 0); err == nil {
		t.Fatal("the store still takes puts after the actor stopped")
	}
}

// TestOpenRefusesTakenPort: a listener that does not bind fails Open, naming it.
func TestOpenRefusesTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Open(Config{NodeID: "n", Store: store.Config{HostBytes: 1 << 20},
		Listeners: []Listener{{Scheme: "resp", Addr: ln.Addr().String(), New: func(*store.Store) Server { return nil }}}})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("resp listener")) {
		t.Fatalf("Open on a taken port: %v, want a resp listener error", err)
	}
	if _, err := Open(Config{Store: store.Config{HostBytes: 1}}); err == nil {
		t.Fatal("Open without a node id succeeded")
	}
}

// TestWriteMetricsGolden checks the metric families against testdata/metrics.golden.
func TestWriteMetricsGolden(t *testing.T) {
	var st store.Stats
	st.Tiers[kv.TierHost] = store.TierStats{CapacityBytes: 4 << 30, UsedBytes: 3 << 20, Blocks: 3, Pinned: 1,
		Hits: 10, Misses: 4, Stored: 9, Evicted: 2, BytesIn: 9 << 20, BytesOut: 10 << 20}
	st.Tiers[kv.TierDisk] = store.TierStats{CapacityBytes: 64 << 30, UsedBytes: 2 << 20, Blocks: 2,
		Hits: 3, Misses: 1, Stored: 2, BytesIn: 2 << 20, BytesOut: 3 << 20}
	st.PutBytes, st.GetBytes, st.Errors = 6<<20, 13<<20, 1
	var buf bytes.Buffer
	WriteMetrics(&buf, "gpu-7", st)
	golden := filepath.Join("testdata", "metrics.golden")
	if *rewrite {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("metrics:\n%s\nwant (%s):\n%s", buf.Bytes(), golden, want)
	}
	if Offloads(st) != 6 || Onboards(st) != 13 {
		t.Errorf("offloads %d onboards %d, want 6 and 13", Offloads(st), Onboards(st))
	}
}

// Every family's # HELP line has a text when metadata is exposed (they were empty).
func TestWriteMetricsHelp(t *testing.T) {
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	var buf bytes.Buffer
	WriteMetrics(&buf, "gpu-7", store.Stats{})
	WriteFSMetrics(&buf, "gpu-7", store.TierStats{})
	helps := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.HasPrefix(line, "# HELP ") {
			continue
		}
		helps++
		if f := strings.Fields(line); len(f) < 4 {
			t.Errorf("%q: no help text", line)
		}
	}
	if helps != len(metricHelp) {
		t.Errorf("%d # HELP lines, want one per family (%d)", helps, len(metricHelp))
	}
}

// Demoting blocks from host memory to disk is no read: the host tier's read bytes count
// only the bytes served (they counted every demotion, with no host hit).
func TestTierReadBytesExcludeDemotions(t *testing.T) {
	st, err := store.Open(store.Config{HostBytes: 4 << 10, DiskDir: t.TempDir(), DiskBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	val := make([]byte, 1<<10)
	for i := range 10 { // 4 fit in host memory: 6 demoted
		if err := st.Put(fmt.Sprintf("k%d", i), nil, val, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		get                string
		wantHost, wantDisk uint64
	}{
		{"", 0, 0},               // demotions only
		{"k9", 1 << 10, 0},       // a host hit
		{"k0", 1 << 10, 1 << 10}, // a disk hit
	} {
		if tc.get != "" {
			if _, err := st.Get(tc.get); err != nil {
				t.Fatal(err)
			}
		}
		s := st.Stats()
		if s.Tiers[kv.TierDisk].Stored == 0 {
			t.Fatal("nothing demoted: the test's caps are wrong")
		}
		if h, d := s.Tiers[kv.TierHost].BytesOut, s.Tiers[kv.TierDisk].BytesOut; h != tc.wantHost || d != tc.wantDisk {
			t.Errorf("after get %q: read bytes host %d disk %d, want %d and %d", tc.get, h, d, tc.wantHost, tc.wantDisk)
		}
		var buf bytes.Buffer
		WriteMetrics(&buf, "n", s)
		if want := fmt.Sprintf(`%s{node="n",tier="host"} %d`, MetricTierOut, tc.wantHost); !strings.Contains(buf.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
