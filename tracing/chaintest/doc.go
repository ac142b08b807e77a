// Package chaintest runs one request through the whole in-process path (gateway, Router
// grain, worker actor, engine over HTTP) and checks its trace. It has only tests, in a
// test binary of their own: the actor library's remote sets gRPC's global logger when a
// member starts, which races with the gRPC connections other tracing tests leave logging.
package chaintest
