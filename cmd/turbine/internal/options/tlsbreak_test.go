package options

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/internal/tlsfiles/tlstest"
)

// TestTLSFlagsBadFiles: files of the wrong kind or shape behind --tls-cert and
// --tls-key fail validation with an error naming the flag and the file.
func TestTLSFlagsBadFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "gateway-ca")
	good := ca.Issue(t, tlstest.Leaf{Name: "gateway", Hosts: []string{"127.0.0.1"}})
	notYet := ca.Issue(t, tlstest.Leaf{Name: "not-yet", NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key string
	}{
		{"certificate is the key", good.KeyFile, good.KeyFile},
		{"files swapped", good.KeyFile, good.CertFile},
		{"key is the certificate", good.CertFile, good.CertFile},
		{"empty certificate", empty, good.KeyFile},
		{"empty key", good.CertFile, empty},
		{"garbage certificate", garbage, good.KeyFile},
		{"certificate is a folder", dir, good.KeyFile},
		{"missing key", good.CertFile, good.KeyFile + ".absent"},
		{"not yet valid", notYet.CertFile, notYet.KeyFile},
		{"CA certificate with the leaf's key", ca.CertFile, good.KeyFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHTTP(t, []string{"--tls-cert", tc.cert, "--tls-key", tc.key})
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "--tls-cert "+tc.cert) {
				t.Fatalf("err = %v: does not name --tls-cert %s", err, tc.cert)
			}
		})
	}
}

// TestMemberTLSTwoOfThree: every way of giving two of the three --member-tls-* flags,
// and a bad pair, fails with an error naming the flag at fault.
func TestMemberTLSTwoOfThree(t *testing.T) {
	ca := tlstest.NewCA(t, "members")
	m := ca.Issue(t, tlstest.Leaf{Name: "member", Hosts: []string{"127.0.0.1"}})
	other := ca.Issue(t, tlstest.Leaf{Name: "other", Hosts: []string{"127.0.0.1"}})
	expired := ca.Issue(t, tlstest.Leaf{Name: "expired", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	cert, key, caf := []string{"--member-tls-cert", m.CertFile}, []string{"--member-tls-key", m.KeyFile}, []string{"--member-tls-ca", ca.CertFile}
	join := func(a ...[]string) []string {
		var out []string
		for _, x := range a {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		args []string
		flag string
	}{
		{"no certificate", join(key, caf), "--member-tls-cert"},
		{"no key", join(cert, caf), "--member-tls-key"},
		{"no CA", join(cert, key), "--member-tls-ca"},
		{"certificate only", cert, "--member-tls-key"},
		{"key only", key, "--member-tls-cert"},
		{"key of another", join(cert, []string{"--member-tls-key", other.KeyFile}, caf), "--member-tls-"},
		{"missing certificate file", join([]string{"--member-tls-cert", m.CertFile + ".absent"}, key, caf), "--member-tls-cert " + m.CertFile + ".absent"},
		{"missing CA file", join(cert, key, []string{"--member-tls-ca", ca.CertFile + ".absent"}), "--member-tls-ca " + ca.CertFile + ".absent"},
		{"expired", []string{"--member-tls-cert", expired.CertFile, "--member-tls-key", expired.KeyFile, "--member-tls-ca", ca.CertFile}, "--member-tls-cert " + expired.CertFile},
		{"certificate is the key", join([]string{"--member-tls-cert", m.KeyFile}, key, caf), "--member-tls-cert " + m.KeyFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultCluster()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			if _, err := cli.ParseCommand(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("err = %v, want one naming %q", err, tc.flag)
			}
		})
	}
}
