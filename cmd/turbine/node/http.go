package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/cmd/turbine/node/nodehttp"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// startHTTP binds --http-host:--http-port (before the node joins the cluster: a taken
// port fails at once) and serves /live, /health and /metrics from board until ctx
// ends or stop is called (docs/metrics.md); stop returns once the server has shut down.
// With --http-port -1 nothing is served.
func startHTTP(ctx context.Context, o Options, board *nodehttp.Board, log zerolog.Logger) (stop func(), err error) {
	ln, err := o.HTTP.Listen()
	if err != nil || ln == nil {
		return func() {}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	log = log.With().Str("component", "node-http").Logger()
	srv := nodehttp.New(nodehttp.Config{Node: o.NodeID, Board: board, Logger: log,
		Own:         func(w io.Writer) { metrics.WritePrometheus(w, true); metrics.WriteFDMetrics(w) },
		MetricsPath: func(engine string) string { return engineMetricsPath(engine, o.MockerDialect) }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := options.Serve(ctx, ln, srv, log); err != nil {
			log.Error().Err(err).Msg("node HTTP port failed")
		}
	}()
	log.Info().Str("url", "http://"+ln.Addr().String()).Msg("node HTTP port listening")
	return func() { cancel(); <-done }, nil
}

// engineMetricsPath is the path of an engine's Prometheus exposition: TensorRT-LLM's
// server (and the mock engine in its dialect) keeps /metrics for JSON iteration stats.
func engineMetricsPath(engine, mockerDialect string) string {
	if engine == "trtllm" || (engine == "mocker" && mockerDialect == string(server.DialectTRTLLM)) {
		return server.TRTLLMPrometheusPath
	}
	return "/metrics"
}

// attachBoard attaches the node agent at pid to board, asked with NodeStatusRequest.
func attachBoard(board *nodehttp.Board, root *actor.RootContext, pid *actor.PID) {
	board.Attach(func(ctx context.Context) (*messages.NodeStatus, error) {
		timeout := time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(d), time.Millisecond)
		}
		res, err := root.RequestFuture(pid, &messages.NodeStatusRequest{}, timeout).Result()
		if err != nil {
			return nil, fmt.Errorf("node status: %w", err)
		}
		st, ok := res.(*messages.NodeStatus)
		if !ok {
			return nil, fmt.Errorf("node status: unexpected answer %T", res)
		}
		return st, nil
	})
}

// boardRouter passes every registration of a worker to the node's board (its readiness
// and engine URL on /health and /metrics) before sending it on to the Router grain.
type boardRouter struct {
	worker.RouterClient
	board *nodehttp.Board
}

func (r boardRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	r.board.Registered(m.GetWorker())
	return r.RouterClient.Register(m)
}

// engineAdvertiseHost is the host of WorkerInfo.engine_url: --engine-host, or when that
// binds every address, --advertise-host, else --member-host (Cluster.Validate requires
// --advertise-host when --member-host binds every address).
func (o *Options) engineAdvertiseHost() string {
	if !wildcard(o.EngineHost) {
		return o.EngineHost
	}
	if o.AdvertiseHost != "" {
		return o.AdvertiseHost
	}
	return o.MemberHost
}

func wildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
