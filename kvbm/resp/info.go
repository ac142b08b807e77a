package resp

import (
	"fmt"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// infoSections are INFO's sections in order; "default", "all" and "everything" (and no
// argument) select all of them.
var infoSections = []string{"server", "clients", "memory", "stats", "keyspace", "kvbm"}

// cmdInfo answers INFO [section ...] with a small redis-like text: the fields clients and
// tools read (redis_version, connected_clients, used_memory, maxmemory, db0 keys) and
// the block store's own per-tier figures under "# Kvbm". An unknown section is empty.
func cmdInfo(s *session, argv [][]byte) {
	want := map[string]bool{}
	for _, a := range argv[1:] {
		switch name := asciiLower(a); name {
		case "default", "all", "everything":
			for _, n := range infoSections {
				want[n] = true
			}
		default:
			want[name] = true
		}
	}
	if len(argv) == 1 {
		for _, n := range infoSections {
			want[n] = true
		}
	}
	s.out.bulkString(infoText(s, want, time.Now()))
}

// infoText renders the wanted sections; now is the clock reading for the uptime.
func infoText(s *session, want map[string]bool, now time.Time) string {
	var b strings.Builder
	section := func(name, title string, lines ...string) {
		if !want[name] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + title + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	c := s.counters
	st := s.st.Stats()
	host := st.Tiers[kv.TierHost]
	var used int64
	for _, t := range st.Tiers {
		used += t.UsedBytes
	}
	up := int64(now.Sub(c.start) / time.Second)
	section("server", "Server",
		"redis_version:"+redisVersion,
		"redis_mode:standalone",
		"turbine_kvbm:1",
		fmt.Sprintf("uptime_in_seconds:%d", up),
		fmt.Sprintf("uptime_in_days:%d", up/86400),
	)
	section("clients", "Clients",
		fmt.Sprintf("connected_clients:%d", c.conns.Load()),
		fmt.Sprintf("maxclients:%d", s.cfg.maxConns),
	)
	section("memory", "Memory",
		fmt.Sprintf("used_memory:%d", host.UsedBytes),
		fmt.Sprintf("maxmemory:%d", host.CapacityBytes),
		"maxmemory_policy:allkeys-lru",
	)
	section("stats", "Stats",
		fmt.Sprintf("total_connections_received:%d", c.totalConns.Load()),
		fmt.Sprintf("total_commands_processed:%d", c.commands.Load()),
		fmt.Sprintf("rejected_connections:%d", c.rejectedConns.Load()),
	)
	var keyspace []string
	if n := keyCount(s.st); n > 0 {
		keyspace = append(keyspace, fmt.Sprintf("db0:keys=%d,expires=0,avg_ttl=0", n))
	}
	section("keyspace", "Keyspace", keyspace...)
	var tiers []string
	for t := kv.TierHost; t < kv.NumTiers; t++ {
		ts := st.Tiers[t]
		if ts.CapacityBytes == 0 && ts.Blocks == 0 {
			continue
		}
		tiers = append(tiers, fmt.Sprintf("tier_%s:capacity_bytes=%d,used_bytes=%d,blocks=%d,pinned=%d,hits=%d,misses=%d,stored=%d,evicted=%d",
			t, ts.CapacityBytes, ts.UsedBytes, ts.Blocks, ts.Pinned, ts.Hits, ts.Misses, ts.Stored, ts.Evicted))
	}
	tiers = append(tiers,
		fmt.Sprintf("used_bytes_all_tiers:%d", used),
		fmt.Sprintf("put_bytes:%d", st.PutBytes),
		fmt.Sprintf("get_bytes:%d", st.GetBytes),
		fmt.Sprintf("store_errors:%d", st.Errors))
	section("kvbm", "Kvbm", tiers...)
	return b.String()
}
