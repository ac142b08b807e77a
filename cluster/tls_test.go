package cluster

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/turbine-llm/turbine/internal/tlsfiles/tlstest"
)

// sendEcho (child side) sends a request with text to ADDRESS/echo and waits wait for the
// answer.
func sendEcho(m *Member, address, wait, text string) string {
	d, err := time.ParseDuration(wait)
	if err != nil {
		return "echo error " + err.Error()
	}
	res, err := m.System.Root.RequestFuture(echoPID(address), wrapString(text), d).Result()
	if err != nil {
		return "echo error " + err.Error()
	}
	if s, ok := res.(*wrapperspb.StringValue); ok && s.Value == text {
		return "echo ok " + text
	}
	return fmt.Sprintf("echo error unexpected answer %T %v", res, res)
}

// tlsEnv is the child's environment entry for member TLS with pair p and the authorities of
// caFile.
func tlsEnv(p tlstest.Pair, caFile string) string {
	return childTLSEnv + "=" + p.CertFile + "," + p.KeyFile + "," + caFile
}

// With mutual TLS, a member whose certificate the cluster's authority signed exchanges
// messages with the others; a member with a certificate of another authority, one that
// does not trust the cluster's authority, and a plaintext one reach no actor: their
// requests fail and the receiver sees none of their messages.
func TestMemberMutualTLS(t *testing.T) {
	if inFreshProcess(t) {
		return
	}
	ca := tlstest.NewCA(t, "members")
	other := tlstest.NewCA(t, "strangers")
	loopback := []string{"127.0.0.1"}
	self := ca.Issue(t, tlstest.Leaf{Name: "receiver", Hosts: loopback})
	logs := &syncBuffer{}
	m, err := Start(Config{Name: "tls-test", Logger: zerolog.New(logs),
		TLS: TLS{CertFile: self.CertFile, KeyFile: self.KeyFile, CAFile: ca.CertFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	defer m.Stop() // before the children end: no peer leaves this member
	received := make(chan string, 16)
	echo := actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(*wrapperspb.StringValue); ok {
			received <- s.Value
			ctx.Respond(s)
		}
	})
	if _, err := m.System.Root.SpawnNamed(echo, "echo"); err != nil {
		t.Fatal(err)
	}
	startMember := func(env ...string) *child {
		return startChild(t, "member", append([]string{childDiscoveryEnv + "=local", childNameEnv + "=tls-test"}, env...)...)
	}

	friend := startMember(tlsEnv(ca.Issue(t, tlstest.Leaf{Name: "friend", Hosts: loopback}), ca.CertFile))
	friend.send("send-echo " + m.Address() + " 20s from-friend")
	if got := friend.waitLine("echo ", 30*time.Second); got != "echo ok from-friend" {
		t.Fatalf("a member of the cluster's authority: %s", got)
	}
	if got := <-received; got != "from-friend" {
		t.Fatalf("the receiver got %q", got)
	}

	refused := map[string]*child{
		"stranger": startMember(tlsEnv(other.Issue(t, tlstest.Leaf{Name: "stranger", Hosts: loopback}), ca.CertFile)),
		"distrust": startMember(tlsEnv(ca.Issue(t, tlstest.Leaf{Name: "distrust", Hosts: loopback}), other.CertFile)),
		"plain":    startMember(),
	}
	for name, c := range refused {
		c.send("send-echo " + m.Address() + " 3s from-" + name)
	}
	for name, c := range refused {
		if got := c.waitLine("echo ", 30*time.Second); !strings.HasPrefix(got, "echo error") {
			t.Errorf("%s member: %s, want an error", name, got)
		}
	}
	// The friend still gets through, and is the only one the receiver ever heard.
	friend.send("send-echo " + m.Address() + " 20s again")
	if got := friend.waitLine("echo ", 30*time.Second); got != "echo ok again" {
		t.Fatalf("the friend after the refusals: %s", got)
	}
	if got := <-received; got != "again" {
		t.Fatalf("the receiver got %q, want only the friend's messages", got)
	}
	// The receiver says why it refused them.
	for _, want := range []string{"member remoting uses mutual TLS", "member TLS handshake failed",
		"certificate signed by unknown authority", "first record does not look like a TLS handshake"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the receiver's log lacks %q:\n%s", want, tail(logs.String(), 4000))
		}
	}
}

// Start refuses incomplete or unusable TLS files with an *OptionError naming the field.
func TestMemberTLSOptionErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "members")
	good := ca.Issue(t, tlstest.Leaf{Name: "good", Hosts: []string{"127.0.0.1"}})
	serverOnly := ca.Issue(t, tlstest.Leaf{Name: "server-only", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	expired := ca.Issue(t, tlstest.Leaf{Name: "expired", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name   string
		tls    TLS
		option string
		reason string
	}{
		{"no CA", TLS{CertFile: good.CertFile, KeyFile: good.KeyFile}, "TLS.CAFile", "all three"},
		{"no key", TLS{CertFile: good.CertFile, CAFile: ca.CertFile}, "TLS.KeyFile", "all three"},
		{"CA only", TLS{CAFile: ca.CertFile}, "TLS.CertFile", "all three"},
		{"key of another", TLS{CertFile: good.CertFile, KeyFile: expired.KeyFile, CAFile: ca.CertFile}, "TLS.CertFile", "does not match"},
		{"CA is a key", TLS{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: good.KeyFile}, "TLS.CAFile", "no PEM CERTIFICATE"},
		{"server usage only", TLS{CertFile: serverOnly.CertFile, KeyFile: serverOnly.KeyFile, CAFile: ca.CertFile}, "TLS.CertFile", "clientAuth"},
		{"expired", TLS{CertFile: expired.CertFile, KeyFile: expired.KeyFile, CAFile: ca.CertFile}, "TLS.CertFile", "expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(Config{Name: "tls-options", TLS: tc.tls, Logger: zerolog.Nop()})
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Option != tc.option || !strings.Contains(oe.Reason, tc.reason) {
				t.Fatalf("err = %v, want an OptionError on %s containing %q", err, tc.option, tc.reason)
			}
		})
	}
	if err := (TLS{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: ca.CertFile}).Validate(time.Now()); err != nil {
		t.Fatalf("good files: %v", err)
	}
}
