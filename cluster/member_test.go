package cluster

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// A taken port makes protoactor's StartMember panic; Start returns an error instead
// (docs/actor-library.md §1).
func TestStartReturnsErrorOnTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for _, discovery := range []string{"local", "consul://127.0.0.1:1"} {
		m, err := Start(Config{Name: "taken", Port: port, Discovery: discovery, Logger: zerolog.Nop()})
		if err == nil {
			m.Stop()
			t.Fatalf("%s: Start on a taken port succeeded", discovery)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(port)) {
			t.Errorf("%s: error %q does not name the port", discovery, err)
		}
	}
	if n := providerGoroutines(); n != 0 {
		t.Fatalf("%d provider goroutines left by failed starts", n)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	if _, err := Start(Config{Host: "0.0.0.0"}); err == nil || !strings.Contains(err.Error(), "AdvertiseHost") {
		t.Fatalf("Start binding 0.0.0.0 without AdvertiseHost: %v", err)
	}
	if _, err := Start(Config{Discovery: "consul:/x"}); err == nil || !strings.Contains(err.Error(), "consul:/x") {
		t.Fatalf("Start with a bad discovery: %v", err)
	}
}

// Bound to every interface, the member advertises AdvertiseHost with the port it listens on.
func TestStartAdvertisesHost(t *testing.T) {
	m, err := Start(Config{Name: "advertise", Host: "0.0.0.0", AdvertiseHost: "127.0.0.1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	host, port, err := net.SplitHostPort(m.Address())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Address() = %q, want 127.0.0.1:<listening port>", m.Address())
	}
	conn, err := net.Dial("tcp", m.Address())
	if err != nil {
		t.Fatalf("dial the advertised address: %v", err)
	}
	conn.Close()
	if m.ID() == "" || m.ID() != m.System.ID {
		t.Fatalf("ID() = %q, system id %q", m.ID(), m.System.ID)
	}
}
