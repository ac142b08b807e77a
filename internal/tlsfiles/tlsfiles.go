// Package tlsfiles loads the TLS certificates, keys and certificate authorities that
// Turbine's listeners and members read from PEM files (docs/tls.md): the gateway's HTTPS
// listener (--tls-cert, --tls-key) and the mutual TLS between cluster members
// (--member-tls-cert, --member-tls-key, --member-tls-ca).
//
// A KeyPair reloads its two files when either changes (size or modification time, looked
// at on each handshake), so that a certificate renewed on disk — by cert-manager, which
// swaps a mounted Secret's files at once, or by a script — is presented from the next
// handshake on, without a restart. A pair that does not load (a half-written renewal, a
// key that does not match) leaves the previous certificate in use; the change is tried
// again at the next handshake. Certificate authorities are read once, at start.
//
// Every Config made here speaks TLS 1.2 and above only.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// MinVersion is the oldest TLS version any listener or dialer made here accepts.
const MinVersion = tls.VersionTLS12

// stamp identifies the contents of a key pair's files as seen by stat: a renewed file has
// another size or modification time.
type stamp struct {
	certSize, keySize int64
	certMod, keyMod   int64 // modification times, Unix nanoseconds
}

// KeyPair is a certificate and its private key, read from PEM files and read again when
// they change. It is safe for concurrent use; its methods fit tls.Config's
// GetCertificate and GetClientCertificate.
type KeyPair struct {
	certFile, keyFile string
	// OnReload, when set before the pair is used, is told of every change seen on disk:
	// the new leaf certificate and a nil error when it was loaded, or the error when it
	// was not (the previous certificate stays in use). Called once per change, under no
	// lock held by a caller.
	onReload func(leaf *x509.Certificate, err error)

	mu      sync.Mutex
	current *tls.Certificate // Leaf set
	loaded  stamp            // the files' stamp when current was read
	failed  stamp            // the last stamp that did not load; not tried again
}

// LoadKeyPair reads certFile (PEM: the certificate, then any intermediates) and keyFile
// (PEM: its private key) and checks that they match. Errors name the file at fault.
// onReload may be nil (see KeyPair).
func LoadKeyPair(certFile, keyFile string, onReload func(leaf *x509.Certificate, err error)) (*KeyPair, error) {
	st, err := statPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := readPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KeyPair{certFile: certFile, keyFile: keyFile, onReload: onReload, current: cert, loaded: st}, nil
}

// Leaf is the certificate presented now (after any reload a handshake caused).
func (k *KeyPair) Leaf() *x509.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current.Leaf
}

// Certificate returns the certificate to present, reading the files again first when
// their stamp changed since they were last read (or last failed to read).
func (k *KeyPair) Certificate() *tls.Certificate {
	st, statErr := statPair(k.certFile, k.keyFile)
	k.mu.Lock()
	if statErr != nil || st == k.loaded || st == k.failed {
		// A file missing for a moment (a Secret's files being swapped) is not a change:
		// the next handshake looks again.
		cur := k.current
		k.mu.Unlock()
		return cur
	}
	cert, err := readPair(k.certFile, k.keyFile)
	if err != nil {
		k.failed = st
	} else {
		k.current, k.loaded, k.failed = cert, st, stamp{}
	}
	cur, hook := k.current, k.onReload
	k.mu.Unlock()
	if hook != nil {
		if err != nil {
			hook(nil, err)
		} else {
			hook(cert.Leaf, nil)
		}
	}
	return cur
}

// GetCertificate is tls.Config.GetCertificate: the current certificate, whatever the
// server name asked for.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate: the current certificate.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

func statPair(certFile, keyFile string) (stamp, error) {
	c, err := statFile(certFile)
	if err != nil {
		return stamp{}, err
	}
	k, err := statFile(keyFile)
	if err != nil {
		return stamp{}, err
	}
	return stamp{certSize: c.Size(), keySize: k.Size(), certMod: c.ModTime().UnixNano(), keyMod: k.ModTime().UnixNano()}, nil
}

func statFile(path string) (os.FileInfo, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("tlsfiles: %w", err)
	case st.IsDir():
		return nil, fmt.Errorf("tlsfiles: %s is a directory, want a PEM file", path)
	}
	return st, nil
}

// readPair reads and parses the pair, with Leaf set.
func readPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The standard library's messages say which of the two it could not use; they
		// never quote the key.
		return nil, fmt.Errorf("tlsfiles: certificate %s, key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsfiles: certificate %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// ParseCertificates returns every CERTIFICATE block of data (PEM), in order. Other block
// types (keys, parameters) are skipped; text around blocks is ignored. It fails when a
// CERTIFICATE block does not parse or when there is none.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsfiles: certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("tlsfiles: no PEM CERTIFICATE block")
	}
	return certs, nil
}

// LoadCA reads the certificate authorities of file (PEM, one or more CERTIFICATE blocks:
// give old and new authorities together while rotating) into a pool. Errors name the
// file.
func LoadCA(file string) (*x509.CertPool, error) {
	if _, err := statFile(file); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	certs, err := ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%w in %s", err, file)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// CheckValidity reports a certificate that is not valid at now: expired, or not valid
// yet. The error gives the bound passed, in UTC.
func CheckValidity(leaf *x509.Certificate, now time.Time) error {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("tlsfiles: certificate %q expired at %s", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("tlsfiles: certificate %q is not valid before %s", leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckUsage reports a certificate whose extended key usages leave out one of need. A
// certificate without extended key usages may serve any purpose, as Go's verifier holds.
func CheckUsage(leaf *x509.Certificate, need ...x509.ExtKeyUsage) error {
	if len(leaf.ExtKeyUsage) == 0 || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil
	}
	for _, u := range need {
		if !slices.Contains(leaf.ExtKeyUsage, u) {
			return fmt.Errorf("tlsfiles: certificate %q lacks the extended key usage %s", leaf.Subject.CommonName, usageName(u))
		}
	}
	return nil
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "serverAuth (TLS Web Server Authentication)"
	case x509.ExtKeyUsageClientAuth:
		return "clientAuth (TLS Web Client Authentication)"
	}
	return fmt.Sprintf("%d", u)
}

// ServerConfig is a server's TLS: kp's current certificate on every handshake, TLS 1.2 and
// above, and nextProtos offered by ALPN. With clientCAs, every client must present a
// certificate that one of them signed (tls.RequireAndVerifyClientCert).
func ServerConfig(kp *KeyPair, clientCAs *x509.CertPool, nextProtos ...string) *tls.Config {
	cfg := &tls.Config{MinVersion: MinVersion, GetCertificate: kp.GetCertificate, NextProtos: nextProtos}
	if clientCAs != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	}
	return cfg
}

// ClientConfig is a client's TLS: the server must present a certificate that one of roots
// signed, for the host dialled (a DNS name or IP address among its subject alternative
// names); kp's current certificate answers a server that asks for one.
func ClientConfig(kp *KeyPair, roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: MinVersion, RootCAs: roots, GetClientCertificate: kp.GetClientCertificate}
}
