package epp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"io"
	"math/big"
	"net"
	"path/filepath"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health service names answered on both ports (docs/epp.md).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	// HealthExtProc is the ext_proc service's name, which Envoy's grpc_health_check asks.
	HealthExtProc = "envoy.service.ext_proc.v3.ExternalProcessor"
	// DefaultHealthInterval is how often readiness is re-evaluated.
	DefaultHealthInterval = time.Second
)

// Server is the ext_proc gRPC shell around Machine and Picker.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	Picker  *Picker
	Machine MachineConfig
	Metrics *Metrics
	Log     zerolog.Logger

	health *health.Server
}

// NewServer returns a Server; metrics may be nil (then it records into its own).
func NewServer(p *Picker, mc MachineConfig, m *Metrics, log zerolog.Logger) *Server {
	if mc.NewRequestID == nil {
		mc.NewRequestID = NewRequestID
	}
	if m == nil {
		m = NewMetrics()
	}
	s := &Server{Picker: p, Machine: mc, Metrics: m, Log: log, health: health.NewServer()}
	s.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(HealthReadiness, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(HealthExtProc, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	return s
}

// NewRequestID is 32 random hex digits.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Process is one ext_proc stream: one HTTP request and its response.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	m := NewMachine(s.Machine)
	defer func() {
		if !m.Finished() {
			s.done(m.Abort().Done)
		}
	}()
	ctx := stream.Context()
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.carry(ctx, stream, m, m.Step(in)); err != nil {
			return err
		}
	}
}

// carry does what a Step says: send, pick (then carry the Picked step), release.
func (s *Server) carry(ctx context.Context, stream extprocv3.ExternalProcessor_ProcessServer, m *Machine, st Step) error {
	if st.Err != nil {
		return status.Error(codes.InvalidArgument, st.Err.Error())
	}
	if st.Done != nil {
		// The Machine is finished whether or not its last answers can be sent: release
		// now, since a failed send ends the stream with nothing left to release it.
		defer s.done(st.Done)
	}
	for _, r := range st.Send {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	if st.Pick != nil {
		start := time.Now()
		p, perr := s.Picker.Pick(ctx, st.Pick)
		s.Metrics.picked(p, perr, time.Since(start))
		if perr != nil {
			s.Log.Debug().Str("request_id", st.Pick.RequestID).Int("status", perr.HTTPStatus()).Str("error", perr.Message).Msg("answered by the endpoint picker")
		}
		return s.carry(ctx, stream, m, m.Picked(p, perr))
	}
	return nil
}

func (s *Server) done(o *Outcome) {
	if o == nil {
		return
	}
	s.Metrics.done(o)
	s.Picker.Release(o)
}

// UpdateHealth sets readiness: the pool resolved and listed, and the cluster reachable.
func (s *Server) UpdateHealth(ctx context.Context) bool {
	ready := s.Picker.Source.Ready() && (s.Picker.Turbine == nil || s.Picker.Turbine.Reachable(ctx))
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{HealthReadiness, HealthExtProc, ""} {
		s.health.SetServingStatus(name, st)
	}
	return ready
}

// Serve serves ext_proc (and health) on grpcLn, with TLS when tlsCfg is set, and health
// on healthLn (plain), re-evaluating readiness every interval, until ctx ends.
func (s *Server) Serve(ctx context.Context, grpcLn, healthLn net.Listener, tlsCfg *tls.Config, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultHealthInterval
	}
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	main := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(main, s)
	healthpb.RegisterHealthServer(main, s.health)
	hs := grpc.NewServer()
	healthpb.RegisterHealthServer(hs, s.health)

	errs := make(chan error, 2)
	go func() { errs <- main.Serve(grpcLn) }()
	go func() { errs <- hs.Serve(healthLn) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	s.UpdateHealth(ctx)
	for {
		select {
		case <-ctx.Done():
			s.health.Shutdown()
			hs.Stop()
			main.GracefulStop()
			return nil
		case err := <-errs:
			main.Stop()
			hs.Stop()
			return err
		case <-tick.C:
			s.UpdateHealth(ctx)
		}
	}
}

// ServerTLS is the gRPC port's TLS: the certificate tls.crt and key tls.key in certDir,
// or a self-signed one made now when certDir is "" (as the Gateway API Inference
// Extension's picker does; gateways do not verify it).
func ServerTLS(certDir string) (*tls.Config, error) {
	if certDir != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
		if err != nil {
			return nil, err
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{Organization: []string{"turbine epp"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}, nil
}
