// Package tlstest makes certificate authorities and the certificates they sign, as PEM
// files in a test's temporary directory, for tests of TLS listeners and of mutual TLS
// between members (docs/tls.md).
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Name     string
	CertFile string // PEM of the authority's certificate: what --member-tls-ca takes
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// serial numbers certificates uniquely within the test binary.
var serial atomic.Int64

// NewCA makes a self-signed authority named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{Name: name, cert: cert, key: key, dir: dir, CertFile: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Leaf describes a certificate to issue.
type Leaf struct {
	Name  string   // common name, and the files' base name
	Hosts []string // DNS names and IP addresses for the subject alternative names
	// Usages are the extended key usages; nil: both server and client authentication.
	Usages    []x509.ExtKeyUsage
	NotBefore time.Time // zero: an hour ago
	NotAfter  time.Time // zero: a day from now
}

// Pair is an issued certificate's files.
type Pair struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
}

// Issue signs a certificate for l and writes its certificate and key as PEM files.
func (ca *CA) Issue(t testing.TB, l Leaf) Pair {
	t.Helper()
	return ca.IssueTo(t, l, filepath.Join(ca.dir, l.Name+".pem"), filepath.Join(ca.dir, l.Name+"-key.pem"))
}

// IssueTo is Issue writing to the given paths (replacing what is there: a renewal).
func (ca *CA) IssueTo(t testing.TB, l Leaf, certFile, keyFile string) Pair {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(24 * time.Hour)
	}
	if l.Usages == nil {
		l.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: l.Name},
		NotBefore: l.NotBefore, NotAfter: l.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: l.Usages,
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, certFile, "CERTIFICATE", der)
	return Pair{CertFile: certFile, KeyFile: keyFile, Cert: cert}
}

// Pool is a pool holding the authority's certificate, for clients.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// writePEM replaces path's contents at once (a rename), as cert-manager's Secret volumes
// do, so that a reader never sees half a file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
