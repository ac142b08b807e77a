package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/internal/tlsfiles"
	"github.com/turbine-llm/turbine/internal/tlsfiles/tlstest"
)

func TestLoadKeyPairErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	a := ca.Issue(t, tlstest.Leaf{Name: "a", Hosts: []string{"127.0.0.1"}})
	b := ca.Issue(t, tlstest.Leaf{Name: "b", Hosts: []string{"127.0.0.1"}})
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"missing certificate", filepath.Join(dir, "none.pem"), a.KeyFile, "none.pem: no such file"},
		{"missing key", a.CertFile, filepath.Join(dir, "none-key.pem"), "none-key.pem: no such file"},
		{"directory", dir, a.KeyFile, "is a directory"},
		{"key of another certificate", a.CertFile, b.KeyFile, "private key does not match public key"},
		{"not PEM", garbage, a.KeyFile, "garbage.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.LoadKeyPair(tc.cert, tc.key, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	kp, err := tlsfiles.LoadKeyPair(a.CertFile, a.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if kp.Leaf().SerialNumber.Cmp(a.Cert.SerialNumber) != 0 {
		t.Fatalf("leaf serial %v, want %v", kp.Leaf().SerialNumber, a.Cert.SerialNumber)
	}
}

// A renewed pair on disk is presented from the next handshake on; a pair that does not
// load leaves the previous one in use, and each change is reported once.
func TestKeyPairReloads(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	first := ca.Issue(t, tlstest.Leaf{Name: "gw", Hosts: []string{"127.0.0.1"}})
	type event struct {
		serial string
		err    error
	}
	var events []event
	kp, err := tlsfiles.LoadKeyPair(first.CertFile, first.KeyFile, func(leaf *x509.Certificate, err error) {
		if err != nil {
			events = append(events, event{err: err})
			return
		}
		events = append(events, event{serial: leaf.SerialNumber.String()})
	})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string { return kp.Certificate().Leaf.SerialNumber.String() }
	if got := serial(); got != first.Cert.SerialNumber.String() || len(events) != 0 {
		t.Fatalf("serial %s, events %v: want %s and none", got, events, first.Cert.SerialNumber)
	}
	second := ca.IssueTo(t, tlstest.Leaf{Name: "gw", Hosts: []string{"127.0.0.1"}}, first.CertFile, first.KeyFile)
	if got := serial(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after renewal: serial %s, want %s", got, second.Cert.SerialNumber)
	}
	// A certificate file that does not parse: the renewed pair stays, the failure is
	// reported once however many handshakes follow.
	if err := os.WriteFile(first.CertFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := serial(); got != second.Cert.SerialNumber.String() {
			t.Fatalf("after a broken write: serial %s, want %s still", got, second.Cert.SerialNumber)
		}
	}
	third := ca.IssueTo(t, tlstest.Leaf{Name: "gw", Hosts: []string{"127.0.0.1"}}, first.CertFile, first.KeyFile)
	if got := serial(); got != third.Cert.SerialNumber.String() {
		t.Fatalf("after the repair: serial %s, want %s", got, third.Cert.SerialNumber)
	}
	if len(events) != 3 || events[0].serial != second.Cert.SerialNumber.String() || events[1].err == nil ||
		events[2].serial != third.Cert.SerialNumber.String() {
		t.Fatalf("events %+v: want the renewal, one failure, the repair", events)
	}
}

func TestParseCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	leaf := ca.Issue(t, tlstest.Leaf{Name: "x"})
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name string
		data string
		n    int
		err  string
	}{
		{"one", read(ca.CertFile), 1, ""},
		{"two authorities while rotating", read(ca.CertFile) + read(other.CertFile), 2, ""},
		{"text and a key around", "# bundle\n" + read(leaf.KeyFile) + read(ca.CertFile) + "trailing\n", 1, ""},
		{"empty", "", 0, "no PEM CERTIFICATE block"},
		{"only a key", read(leaf.KeyFile), 0, "no PEM CERTIFICATE block"},
		{"bad DER", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", 0, "certificate 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certs, err := tlsfiles.ParseCertificates([]byte(tc.data))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(certs) != tc.n {
				t.Fatalf("%d certificates, err %v; want %d", len(certs), err, tc.n)
			}
		})
	}
}

func TestLoadCANamesTheFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-ca.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{empty, filepath.Join(dir, "absent-ca.pem")} {
		if _, err := tlsfiles.LoadCA(path); err == nil || !strings.Contains(err.Error(), filepath.Base(path)) {
			t.Errorf("LoadCA(%s) err = %v, want one naming the file", path, err)
		}
	}
}

func FuzzParseCertificates(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.pem")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := tlsfiles.ParseCertificates(data)
		if (err == nil) != (len(certs) > 0) {
			t.Fatalf("%d certificates with err %v", len(certs), err)
		}
	})
}

func TestCheckValidity(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	now := time.Now()
	c := ca.Issue(t, tlstest.Leaf{Name: "v", NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}).Cert
	for _, tc := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"valid", now, ""},
		{"expired", now.Add(2 * time.Hour), "expired at"},
		{"not yet", now.Add(-2 * time.Hour), "not valid before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tlsfiles.CheckValidity(c, tc.at)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckUsage(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, tc := range []struct {
		name   string
		usages []x509.ExtKeyUsage
		want   string
	}{
		{"both", both, ""},
		{"any", []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, ""},
		{"server only", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "clientAuth"},
		{"client only", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, "serverAuth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ca.Issue(t, tlstest.Leaf{Name: "u", Usages: tc.usages}).Cert
			err := tlsfiles.CheckUsage(c, both...)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// handshake runs a TLS handshake between server and client configs over loopback TCP
// (buffered, unlike net.Pipe, so that an alert never waits for a reader) and returns the
// client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer sc.Close()
		s := tls.Server(sc, server)
		if err = s.Handshake(); err == nil {
			// The client's verdict on the server's certificate arrives with its first
			// record (TLS 1.3): read it.
			_, err = s.Read(make([]byte, 1))
		}
		done <- err
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := tls.Client(cc, client)
	if clientErr = c.Handshake(); clientErr == nil {
		if _, clientErr = c.Write([]byte{1}); clientErr == nil {
			// The server's verdict on the client's certificate (TLS 1.3) arrives after
			// the client's handshake ended: wait for its alert or for the connection's end.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, clientErr = c.Read(make([]byte, 1))
		}
	}
	serverErr = <-done
	return clientErr, serverErr
}

// Mutual TLS: a client with a certificate of the server's authority gets through; one
// without a certificate, one signed by another authority, and one that asks for TLS 1.1
// do not.
func TestMutualConfigs(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	load := func(p tlstest.Pair) *tlsfiles.KeyPair {
		kp, err := tlsfiles.LoadKeyPair(p.CertFile, p.KeyFile, nil)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	srvKP := load(ca.Issue(t, tlstest.Leaf{Name: "srv", Hosts: []string{"member-0.turbine"}}))
	server := tlsfiles.ServerConfig(srvKP, ca.Pool())
	good := tlsfiles.ClientConfig(load(ca.Issue(t, tlstest.Leaf{Name: "cli"})), ca.Pool())
	good.ServerName = "member-0.turbine"
	stranger := tlsfiles.ClientConfig(load(other.Issue(t, tlstest.Leaf{Name: "stranger"})), ca.Pool())
	stranger.ServerName = "member-0.turbine"
	noCert := &tls.Config{RootCAs: ca.Pool(), ServerName: "member-0.turbine"}
	old := good.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	wrongName := good.Clone()
	wrongName.ServerName = "member-1.turbine"

	// The good client's read ends with the server closing after its one byte.
	if cerr, serr := handshake(t, server, good); serr != nil || (cerr != nil && !errors.Is(cerr, io.EOF)) {
		t.Fatalf("good client: client %v, server %v", cerr, serr)
	}
	for _, tc := range []struct {
		name   string
		client *tls.Config
		want   string // in the server's error
	}{
		{"stranger", stranger, "unknown authority"},
		{"no certificate", noCert, "certificate"},
		{"TLS 1.1", old, "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr, serr := handshake(t, server, tc.client)
			if serr == nil || !strings.Contains(serr.Error(), tc.want) || cerr == nil {
				t.Fatalf("client %v, server %v: want both to fail, the server with %q", cerr, serr, tc.want)
			}
		})
	}
	cerr, _ := handshake(t, server, wrongName)
	var hostErr x509.HostnameError
	if !errors.As(cerr, &hostErr) {
		t.Fatalf("dialling a name the certificate lacks: %v, want a hostname error", cerr)
	}
}
