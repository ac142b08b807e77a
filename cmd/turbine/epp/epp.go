// Package epp is `turbine epp`: the endpoint picker a Gateway API Inference Extension
// gateway asks over Envoy's ext_proc which model server serves each request
// (docs/epp.md). It joins the cluster as a member, like `turbine frontend`, to read the
// model cards and ask the models' Router grains.
package epp

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/epp"
	"github.com/turbine-llm/turbine/epp/pool"
	"github.com/turbine-llm/turbine/tracing"
)

// Defaults of the command's own flags (docs/epp.md, "Flags").
const (
	DefaultGRPCPort       = 9002
	DefaultGRPCHealthPort = 9003
	DefaultMetricsPort    = 9090
)

// Options are the command's flags.
type Options struct {
	options.Cluster
	options.Log
	// Tracing: --otlp-endpoint and its flags (docs/tracing.md).
	Tracing         options.Tracing
	Host            string
	GRPCPort        int
	GRPCHealthPort  int
	MetricsPort     int
	PoolName        string
	PoolNamespace   string
	Endpoints       string
	Kubeconfig      string
	SecureServing   bool
	CertPath        string
	Fallbacks       int
	MetricsInterval time.Duration
	ModelCacheDir   string
	MaxBodyBytes    int
	Turbine         bool
}

// Defaults are the embedded defaults.
func Defaults() Options {
	return Options{Cluster: options.DefaultCluster(), Log: options.DefaultLog(), Tracing: options.DefaultTracing(), Host: "0.0.0.0",
		GRPCPort: DefaultGRPCPort, GRPCHealthPort: DefaultGRPCHealthPort, MetricsPort: DefaultMetricsPort,
		PoolNamespace: "default", SecureServing: true, MetricsInterval: pool.DefaultMetricsInterval,
		MaxBodyBytes: epp.DefaultMaxBodyBytes, Turbine: true}
}

func flags(o *Options, fs *flag.FlagSet) {
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
	o.Tracing.Flags(fs)
	fs.StringVar(&o.Host, "host", o.Host, "address the gRPC, health and metrics ports bind")
	fs.IntVar(&o.GRPCPort, "grpc-port", o.GRPCPort, "port of the ext_proc gRPC service (and gRPC health)")
	fs.IntVar(&o.GRPCHealthPort, "grpc-health-port", o.GRPCHealthPort, "port of the plain gRPC health service (liveness, readiness)")
	fs.IntVar(&o.MetricsPort, "metrics-port", o.MetricsPort, "port of GET /metrics (0: off)")
	fs.StringVar(&o.PoolName, "pool-name", o.PoolName, "the InferencePool (inference.networking.k8s.io/v1) whose pods are the endpoints")
	fs.StringVar(&o.PoolNamespace, "pool-namespace", o.PoolNamespace, "namespace of --pool-name")
	fs.StringVar(&o.Endpoints, "endpoints", o.Endpoints, "static endpoints ip:port,ip:port,… instead of an InferencePool (off Kubernetes)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file (default: the in-cluster configuration)")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "serve the gRPC port over TLS (self-signed unless --cert-path)")
	fs.StringVar(&o.CertPath, "cert-path", o.CertPath, "folder with tls.crt and tls.key for --secure-serving")
	fs.IntVar(&o.Fallbacks, "fallback-endpoints", o.Fallbacks, "endpoints listed after the primary in x-gateway-destination-endpoint for the gateway to retry on (0: the primary only, as an ORIGINAL_DST cluster needs)")
	fs.DurationVar(&o.MetricsInterval, "metrics-interval", o.MetricsInterval, "how often the /metrics of endpoints that are not Turbine workers are scraped")
	fs.StringVar(&o.ModelCacheDir, "model-cache-dir", o.ModelCacheDir, "where tokenizer files fetched from workers are kept, one folder per digest (default $TURBINE_CACHE_DIR/models or ~/.cache/turbine/models)")
	fs.IntVar(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest request body buffered (bytes); larger: 413")
	fs.BoolVar(&o.Turbine, "turbine", o.Turbine, "join the Turbine cluster and route through the models' routers (false: pick every endpoint by its scraped load)")
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	port := func(name string, p int, zeroOK bool) error {
		if p < 0 || p > 65535 || (p == 0 && !zeroOK) {
			return fmt.Errorf("%s %d: want 1..65535", name, p)
		}
		return nil
	}
	for _, err := range []error{port("--grpc-port", o.GRPCPort, false), port("--grpc-health-port", o.GRPCHealthPort, false),
		port("--metrics-port", o.MetricsPort, true)} {
		if err != nil {
			return err
		}
	}
	switch {
	case (o.PoolName == "") == (o.Endpoints == ""):
		return errors.New("--pool-name or --endpoints: give exactly one")
	case o.Fallbacks < 0:
		return fmt.Errorf("--fallback-endpoints %d: must be ≥ 0", o.Fallbacks)
	case o.MetricsInterval <= 0:
		return fmt.Errorf("--metrics-interval %v: must be > 0", o.MetricsInterval)
	case o.MaxBodyBytes <= 0:
		return fmt.Errorf("--max-body-bytes %d: must be > 0", o.MaxBodyBytes)
	case o.CertPath != "" && !o.SecureServing:
		return errors.New("--cert-path needs --secure-serving")
	}
	if err := o.Tracing.Validate(); err != nil {
		return err
	}
	if o.Endpoints != "" {
		if _, err := pool.ParseEndpoints(o.Endpoints); err != nil {
			return fmt.Errorf("--endpoints: %w", err)
		}
	}
	if o.Turbine {
		return o.Cluster.Validate()
	}
	return nil
}

// Run is `turbine epp`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	return options.Main(ctx, options.Command{Name: "epp",
		Summary: "Picks the endpoint of each request for a Gateway API Inference Extension gateway (Envoy ext_proc).",
		Example: "TURBINE_POOL_NAME=turbine-pool", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return run(ctx, o, log) })
}

// source is the endpoints: static, or the InferencePool's pods; with their scraped load.
func source(ctx context.Context, o Options) (*pool.Scraper, error) {
	var src pool.Source
	if o.Endpoints != "" {
		s, err := pool.NewStatic(o.Endpoints)
		if err != nil {
			return nil, fmt.Errorf("--endpoints: %w", err)
		}
		src = s
	} else {
		cfg, err := restConfig(o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		k, err := pool.NewKubernetes(pool.KubernetesConfig{Dynamic: dyn, Clientset: cs, Namespace: o.PoolNamespace, Name: o.PoolName})
		if err != nil {
			return nil, err
		}
		k.Start(ctx)
		src = k
	}
	s := pool.NewScraper(src, pool.ScrapeConfig{Interval: o.MetricsInterval})
	go s.Run(ctx)
	return s, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func run(ctx context.Context, o Options, log zerolog.Logger) error {
	stopTracing, err := o.Tracing.Start(ctx, tracing.ServiceEPP, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	src, err := source(ctx, o)
	if err != nil {
		return err
	}
	m := epp.NewMetrics()
	picker := &epp.Picker{Source: src, Fallbacks: o.Fallbacks}
	memberErr := make(chan error, 1)
	if o.Turbine {
		memberCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		started := make(chan *epp.ClusterTurbine, 1)
		var tb *epp.ClusterTurbine
		go func() {
			memberErr <- options.RunMember(memberCtx, o.Cluster.Config(nil, log), log, func(mctx context.Context, mem *cluster.Member) error {
				if tb == nil {
					t, err := epp.NewClusterTurbine(mem.Cluster, epp.ClusterConfig{Logger: log, ModelCacheDir: o.ModelCacheDir, MaxBodyBytes: int64(o.MaxBodyBytes)})
					if err != nil {
						return err
					}
					tb = t
					started <- t
				} else {
					tb.SetCluster(mem.Cluster)
				}
				log.Info().Str("member", mem.ID()).Str("discovery", o.Discovery).Msg("endpoint picker joined the cluster")
				<-mctx.Done()
				return nil
			})
		}()
		select {
		case t := <-started:
			picker.Turbine = t
		case err := <-memberErr:
			return err
		case <-ctx.Done():
			return nil
		}
	}
	srv := epp.NewServer(picker, epp.MachineConfig{MaxBodyBytes: o.MaxBodyBytes}, m, log)
	var lc net.ListenConfig
	grpcLn, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.GRPCPort)))
	if err != nil {
		return fmt.Errorf("--grpc-port: %w", err)
	}
	healthLn, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.GRPCHealthPort)))
	if err != nil {
		grpcLn.Close()
		return fmt.Errorf("--grpc-health-port: %w", err)
	}
	if o.MetricsPort > 0 {
		ml, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.MetricsPort)))
		if err != nil {
			return fmt.Errorf("--metrics-port: %w", err)
		}
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			m.WritePrometheus(w)
			src.Metrics().WritePrometheus(w)
			metrics.WriteProcessMetrics(w)
		}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ml) }()
		defer hs.Close()
	}
	tlsCfg, err := tlsConfig(o)
	if err != nil {
		return fmt.Errorf("--cert-path: %w", err)
	}
	log.Info().Str("grpc", grpcLn.Addr().String()).Str("health", healthLn.Addr().String()).Bool("tls", tlsCfg != nil).
		Int("fallback_endpoints", o.Fallbacks).Msg("turbine epp serving")
	return srv.Serve(ctx, grpcLn, healthLn, tlsCfg, epp.DefaultHealthInterval)
}

func tlsConfig(o Options) (*tls.Config, error) {
	if !o.SecureServing {
		return nil, nil
	}
	return epp.ServerTLS(o.CertPath)
}
