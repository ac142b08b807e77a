package cluster

import (
	"context"
	"crypto/x509"
	"net"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/turbine-llm/turbine/internal/tlsfiles"
)

// TLS is mutual TLS on a member's remoting (gRPC): the member presents CertFile and
// KeyFile (PEM) both as the server its peers dial and as the client it dials them with,
// and accepts only peers whose certificate an authority of CAFile (PEM) signed; it
// verifies every peer it dials against CAFile too, for the host it dials (the peer's
// advertised host must be a DNS name or IP address among the peer certificate's subject
// alternative names). All three files or none; none: plaintext remoting, as before
// (docs/tls.md).
//
// The certificate and key are read again when they change on disk (from the next
// handshake: connections already open stay as they are); the authorities are read once,
// at Start. Consul's own TLS is ConsulOptions'.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// Enabled reports whether any of the files is set (Validate requires all three then).
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// Validate checks the files at now: all three or none; the pair loads and matches, its
// certificate is valid at now and fit for both server and client authentication; the
// authorities' file holds at least one certificate. The error is an *OptionError naming
// the field ("TLS.CertFile", "TLS.KeyFile", "TLS.CAFile").
func (t TLS) Validate(now time.Time) error {
	_, _, err := t.load(now, nil)
	return err
}

// load reads the files for Validate and Start; nil, nil without TLS.
func (t TLS) load(now time.Time, onReload func(*x509.Certificate, error)) (*tlsfiles.KeyPair, *x509.CertPool, error) {
	if !t.Enabled() {
		return nil, nil, nil
	}
	for _, f := range []struct{ name, path string }{
		{"TLS.CertFile", t.CertFile}, {"TLS.KeyFile", t.KeyFile}, {"TLS.CAFile", t.CAFile},
	} {
		if f.path == "" {
			return nil, nil, &OptionError{f.name, `""`, "mutual TLS between members needs TLS.CertFile, TLS.KeyFile and TLS.CAFile, all three"}
		}
	}
	kp, err := tlsfiles.LoadKeyPair(t.CertFile, t.KeyFile, onReload)
	if err != nil {
		return nil, nil, &OptionError{"TLS.CertFile", t.CertFile, err.Error()}
	}
	if err := tlsfiles.CheckValidity(kp.Leaf(), now); err != nil {
		return nil, nil, &OptionError{"TLS.CertFile", t.CertFile, err.Error()}
	}
	if err := tlsfiles.CheckUsage(kp.Leaf(), x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, nil, &OptionError{"TLS.CertFile", t.CertFile, err.Error() + ": a member's certificate serves both ends of its connections"}
	}
	pool, err := tlsfiles.LoadCA(t.CAFile)
	if err != nil {
		return nil, nil, &OptionError{"TLS.CAFile", t.CAFile, err.Error()}
	}
	return kp, pool, nil
}

// transport is the gRPC transport of a member's remoting: mutual TLS (server: client
// certificates required and verified; dialer: the peer's certificate verified) or, without
// TLS, plaintext.
type transport struct {
	server []grpc.ServerOption // none for plaintext
	dial   grpc.DialOption
}

// newTransport loads t's files (Validate's checks) and builds the transport; renewals seen
// on disk are logged.
func newTransport(t TLS, now time.Time, log zerolog.Logger) (transport, error) {
	kp, pool, err := t.load(now, func(leaf *x509.Certificate, err error) {
		if err != nil {
			log.Error().Err(err).Str("cert_file", t.CertFile).Msg("member TLS certificate changed on disk but does not load: the previous one stays in use")
			return
		}
		log.Info().Str("cert_file", t.CertFile).Str("subject", leaf.Subject.CommonName).Time("not_after", leaf.NotAfter).
			Msg("member TLS certificate reloaded")
	})
	if err != nil || kp == nil {
		return transport{dial: grpc.WithTransportCredentials(insecure.NewCredentials())}, err
	}
	leaf := kp.Leaf()
	log.Info().Str("subject", leaf.Subject.CommonName).Strs("dns_names", leaf.DNSNames).
		Strs("ips", ipList(leaf)).Time("not_after", leaf.NotAfter).Msg("member remoting uses mutual TLS")
	limit := newRateLimit(handshakeLogEvery)
	return transport{
		server: []grpc.ServerOption{grpc.Creds(loggedCreds{credentials.NewTLS(tlsfiles.ServerConfig(kp, pool)), log, limit})},
		dial:   grpc.WithTransportCredentials(loggedCreds{credentials.NewTLS(tlsfiles.ClientConfig(kp, pool)), log, limit}),
	}, nil
}

// loggedCreds logs failed handshakes, at most one a handshakeLogEvery per peer host, side
// and error: gRPC keeps them to itself, and a dialling member only sees its connection time
// out, so without this line a certificate of the wrong authority, a host missing from
// the certificate's names or a plaintext peer would leave no trace of why.
type loggedCreds struct {
	credentials.TransportCredentials
	log   zerolog.Logger
	limit *rateLimit
}

func (c loggedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil {
		c.failed("dial", authority, conn, err)
	}
	return out, info, err
}

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.failed("accept", "", conn, err)
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{c.TransportCredentials.Clone(), c.log, c.limit}
}

func (c loggedCreds) failed(side, authority string, conn net.Conn, err error) {
	peer := conn.RemoteAddr().String()
	host, _, splitErr := net.SplitHostPort(peer)
	if splitErr != nil {
		host = peer
	}
	ok, suppressed := c.limit.allow(side+" "+host+" "+err.Error(), time.Now())
	if !ok {
		return
	}
	e := c.log.Warn().Err(err).Str("side", side).Str("peer", peer).Int("suppressed", suppressed)
	if authority != "" {
		e = e.Str("dialled", authority)
	}
	e.Msg("member TLS handshake failed")
}

func ipList(c *x509.Certificate) []string {
	ips := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		ips[i] = ip.String()
	}
	return ips
}
