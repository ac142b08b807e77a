package consultest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func put(t *testing.T, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A restart keeps the ports and loses the registrations (dev mode), which is what the
// cluster tests rely on.
func TestRestartKeepsPortsLosesRegistrations(t *testing.T) {
	a := Start(t)
	base := "http://" + a.Addr() + "/v1/agent/service/"
	if code := put(t, base+"register", `{"ID":"x","Name":"x"}`); code != http.StatusOK {
		t.Fatalf("register: status %d", code)
	}
	if code := get(t, base+"x"); code != http.StatusOK {
		t.Fatalf("service x after register: status %d", code)
	}
	before := a.Ports()

	a.Stop()
	if _, err := http.Get("http://" + a.Addr() + "/v1/status/leader"); err == nil {
		t.Fatal("the agent still answers after Stop")
	}
	a.Restart(t)
	if a.Ports() != before {
		t.Fatalf("ports changed across restart: %+v then %+v", before, a.Ports())
	}
	if code := get(t, base+"x"); code != http.StatusNotFound {
		t.Fatalf("service x after restart: status %d, want 404 (dev mode keeps nothing)", code)
	}
}

func TestPauseResume(t *testing.T) {
	a := Start(t)
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr()+"/v1/status/leader", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a paused agent answered")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused agent: %v, want a timeout", err)
	}
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	if code := get(t, "http://"+a.Addr()+"/v1/status/leader"); code != http.StatusOK {
		t.Fatalf("resumed agent: status %d", code)
	}
}

func TestBinaryFromEnvironment(t *testing.T) {
	t.Setenv("TURBINE_CONSUL", t.TempDir()) // a directory is no executable
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "TURBINE_CONSUL") {
		t.Fatalf("Find with TURBINE_CONSUL a directory: %v, want an error naming the variable", err)
	}
}

// An agent whose port is bound by someone else exits at once, and start says so with
// errPortTaken, the error Start answers by choosing other ports.
func TestStartSeesPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ports, err := freePorts()
	if err != nil {
		t.Fatal(err)
	}
	ports.HTTP = l.Addr().(*net.TCPAddr).Port
	a := &Agent{bin: Binary(t), dir: t.TempDir(), ports: ports}
	defer a.Stop()
	if err := a.start(); !errors.Is(err, errPortTaken) {
		t.Fatalf("start with its HTTP port taken: %v, want errPortTaken\n%s", err, a.LogTail())
	}
}
