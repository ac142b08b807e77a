package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

const (
	// protoSerializerID is protoactor's serializer id for protobuf messages.
	protoSerializerID = 0
	// dialTimeout bounds one connection attempt to a peer.
	dialTimeout = 5 * time.Second
)

// remoteOptions are the gRPC settings protoactor lacks: message-size limits raised to
// maxBytes on both sides (docs/actor-library.md §5), the server's streams screened for
// messages it cannot decode and panics in handlers turned into errors (§4), bounded
// blocking dials (§6), and every connection's answer watched for "blocked" (§2).
// WithServerOptions and WithDialOptions replace protoactor's defaults, so the transport
// (tr: mutual TLS, or the plaintext protoactor uses, tls.go) is stated here.
func remoteOptions(maxBytes int, g *grpcGuard, tr transport) []remote.ConfigOption {
	return []remote.ConfigOption{
		remote.WithServerOptions(append([]grpc.ServerOption{
			grpc.MaxRecvMsgSize(maxBytes),
			grpc.MaxSendMsgSize(maxBytes),
			grpc.ChainStreamInterceptor(g.recoverStream, g.screenStream),
			grpc.ChainUnaryInterceptor(g.recoverUnary),
		}, tr.server...)...),
		remote.WithDialOptions(
			tr.dial,
			// A blocking dial, bounded in time, fails without leaving behind a connection
			// that redials the dead peer forever (docs/actor-library.md §6). protoactor
			// calls grpc.Dial, not DialContext, so WithTimeout is the only bound it honours.
			grpc.WithBlock(),
			grpc.FailOnNonTempDialError(true),
			grpc.WithTimeout(dialTimeout), //nolint:staticcheck // see above
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBytes), grpc.MaxCallSendMsgSize(maxBytes)),
			grpc.WithChainStreamInterceptor(g.watchClientStream),
		),
	}
}

// grpcGuard holds the interceptors' shared state: the rate-limited log and the callback for
// peers that answer "blocked".
type grpcGuard struct {
	log       zerolog.Logger
	limit     *rateLimit
	now       func() time.Time
	blockedBy func(peer string)
	// known reports whether a protobuf message type is linked into this process.
	known func(typeName string) bool
}

func newGRPCGuard(log zerolog.Logger, blockedBy func(string)) *grpcGuard {
	return &grpcGuard{log: log, limit: newRateLimit(unknownTypeLogEvery), now: time.Now,
		blockedBy: blockedBy, known: linkedType}
}

func linkedType(name string) bool {
	_, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	return err == nil
}

func (g *grpcGuard) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer g.recoverTo(info.FullMethod, &err)
	return h(srv, ss)
}

func (g *grpcGuard) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer g.recoverTo(info.FullMethod, &err)
	return h(ctx, req)
}

func (g *grpcGuard) recoverTo(method string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	if ok, suppressed := g.limit.allow("panic "+method, g.now()); ok {
		g.log.Error().Str("method", method).Int("suppressed", suppressed).Str("panic", fmt.Sprint(r)).
			Msg("remote handler panicked; its connection is closed and the member carries on")
	}
	*err = status.Errorf(codes.Internal, "cluster: remote handler %s panicked: %v", method, r)
}

// screenStream drops, from every batch the server receives, the messages it could not
// decode: protobuf types this process does not link and envelopes whose indexes point
// outside the batch, on which protoactor would crash the process (docs/actor-library.md
// §4). The rest of the batch is delivered.
func (g *grpcGuard) screenStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &screenedStream{ServerStream: ss, g: g})
}

type screenedStream struct {
	grpc.ServerStream
	g *grpcGuard
}

func (s *screenedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if b := rm.GetMessageBatch(); b != nil {
			for _, d := range screenBatch(b, s.g.known) {
				s.g.logDropped(d)
			}
		}
	}
	return nil
}

func (g *grpcGuard) logDropped(d droppedEnvelope) {
	if ok, suppressed := g.limit.allow("drop "+d.typeName+" "+d.reason, g.now()); ok {
		g.log.Warn().Str("type", d.typeName).Str("target", d.target).Str("reason", d.reason).
			Int("suppressed", suppressed).Msg("remote message dropped")
	}
}

// droppedEnvelope describes one message screenBatch removed.
type droppedEnvelope struct {
	typeName, target, reason string
}

// screenBatch removes from b, in place, the envelopes the receiver could not decode, and
// says which. known reports whether a protobuf type name is linked. Pure.
func screenBatch(b *remote.MessageBatch, known func(string) bool) []droppedEnvelope {
	var dropped []droppedEnvelope
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		if d, bad := checkEnvelope(b, e, known); bad {
			dropped = append(dropped, d)
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	return dropped
}

func checkEnvelope(b *remote.MessageBatch, e *remote.MessageEnvelope, known func(string) bool) (droppedEnvelope, bool) {
	d := droppedEnvelope{typeName: "?", target: "?"}
	if e.Target >= 0 && int(e.Target) < len(b.Targets) && b.Targets[e.Target] != nil {
		d.target = b.Targets[e.Target].String()
	} else {
		d.reason = fmt.Sprintf("target index %d outside the batch's %d targets", e.Target, len(b.Targets))
		return d, true
	}
	if e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames) {
		d.reason = fmt.Sprintf("type index %d outside the batch's %d type names", e.TypeId, len(b.TypeNames))
		return d, true
	}
	d.typeName = b.TypeNames[e.TypeId]
	switch {
	case e.Sender < 0 || int(e.Sender) > len(b.Senders):
		d.reason = fmt.Sprintf("sender index %d outside the batch's %d senders", e.Sender, len(b.Senders))
	case e.SerializerId < 0:
		d.reason = fmt.Sprintf("serializer id %d", e.SerializerId)
	case e.SerializerId == protoSerializerID && !known(d.typeName):
		d.reason = "protobuf type not linked into this member"
	default:
		return d, false
	}
	return d, true
}

// watchClientStream reports peers whose connect response says they have blocked us (a
// sign for the zombie watchdog, docs/actor-library.md §2).
func (g *grpcGuard) watchClientStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &watchedStream{ClientStream: cs, g: g}, nil
}

type watchedStream struct {
	grpc.ClientStream
	g *grpcGuard
}

func (s *watchedStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if cr := rm.GetConnectResponse(); cr != nil && cr.Blocked && s.g.blockedBy != nil {
			s.g.blockedBy(cr.MemberId)
		}
	}
	return nil
}

// rateLimitKeys bounds how many keys a rateLimit remembers.
const rateLimitKeys = 1024

// rateLimit lets one event per key through every `every`, counting those it holds back.
type rateLimit struct {
	every      time.Duration
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newRateLimit(every time.Duration) *rateLimit {
	return &rateLimit{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether an event for key at now may be logged, and how many were held back
// since the last one that was.
func (r *rateLimit) allow(key string, now time.Time) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, seen := r.last[key]; seen && now.Sub(last) < r.every {
		r.suppressed[key]++
		return false, 0
	}
	if len(r.last) >= rateLimitKeys {
		clear(r.last) // keys come from remote input: bound the memory they take
		clear(r.suppressed)
	}
	r.last[key] = now
	suppressed = r.suppressed[key]
	delete(r.suppressed, key)
	return true, suppressed
}
