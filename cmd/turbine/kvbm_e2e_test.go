package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	store "github.com/turbine-llm/turbine/kvbm"
)

// kvbmList is the part of GET /admin/kvbm the test reads.
type kvbmList struct {
	Nodes []struct {
		NodeID       string `json:"node_id"`
		RESPAddress  string `json:"resp_address"`
		LMAddress    string `json:"lm_address"`
		Policy       string `json:"policy"`
		Offloads     uint64 `json:"offloads"`
		Onboards     uint64 `json:"onboards"`
		OffloadBytes uint64 `json:"offload_bytes"`
		OnboardBytes uint64 `json:"onboard_bytes"`
		Models       []string
		Tiers        []struct {
			Tier          string `json:"tier"`
			CapacityBytes int64  `json:"capacity_bytes"`
			UsedBytes     int64  `json:"used_bytes"`
			Blocks        int64  `json:"blocks"`
			Hits          uint64 `json:"hits"`
		} `json:"tiers"`
	} `json:"nodes"`
}

func (s *server) kvbm() kvbmList {
	s.t.Helper()
	resp, err := http.Get(s.url + "/admin/kvbm")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var l kvbmList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != 200 {
		s.t.Fatalf("GET /admin/kvbm: %d, %v", resp.StatusCode, err)
	}
	return l
}

// respCall sends one RESP2 command and returns its reply's first line.
func respCall(t *testing.T, rw *bufio.ReadWriter, args ...string) string {
	t.Helper()
	fmt.Fprintf(rw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rw, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rw.Flush(); err != nil {
		t.Fatal(err)
	}
	line, err := rw.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
		var n int
		fmt.Sscanf(line, "$%d", &n)
		if _, err := io.ReadFull(rw, make([]byte, n+2)); err != nil {
			t.Fatal(err)
		}
	}
	return line
}

// TestServeKvbm: `turbine serve --kvbm` runs a block manager in the process: GET
// /admin/kvbm lists it with its tiers; a block put over RESP (as the mock engine and
// LMCache's resp:// put them) shows there, and a get of it counts a hit.
func TestServeKvbm(t *testing.T) {
	s := startServe(t, 1, "--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "0", "--kvbm-host-bytes", "16MiB",
		"--kvbm-disk-dir", t.TempDir(), "--kvbm-disk-bytes", "64MiB")
	l := s.kvbm()
	if len(l.Nodes) != 1 || l.Nodes[0].NodeID != "local" || l.Nodes[0].Policy != "demote" || l.Nodes[0].LMAddress == "" ||
		!strings.HasPrefix(l.Nodes[0].RESPAddress, "resp://127.0.0.1:") || len(l.Nodes[0].Tiers) != 2 ||
		l.Nodes[0].Tiers[0].CapacityBytes != 16<<20 {
		t.Fatalf("GET /admin/kvbm: %+v", l)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.Nodes[0].RESPAddress, "resp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	block := strings.Repeat("k", 4096)
	key := store.BlockKey("turbine-mock", 0xabc)
	if r := respCall(t, rw, "SET", key, block); r != "+OK\r\n" {
		t.Fatalf("SET: %q", r)
	}
	if r := respCall(t, rw, "GET", key); r != "$4096\r\n" {
		t.Fatalf("GET: %q", r)
	}
	s.waitFor(10*time.Second, "the block in GET /admin/kvbm", func() bool {
		n := s.kvbm().Nodes[0]
		return n.Tiers[0].Blocks == 1 && n.Tiers[0].Hits == 1 && n.OffloadBytes == 4096 && n.OnboardBytes == 4096 &&
			len(n.Models) == 1 && n.Models[0] == "turbine-mock"
	})
}
