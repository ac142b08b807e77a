// Package epp is `turbine epp`, an endpoint picker for the Gateway API Inference
// Extension (docs/epp.md): an Envoy ext_proc gRPC server that a GIE-conformant gateway
// asks, for every HTTP request, which model server endpoint ("ip:port") should serve it.
//
// # Files
//
//   - machine.go: the pure state machine of one ext_proc stream (Machine): processing
//     requests in, processing responses to send, a pick to make and a request to
//     release out. No goroutines, sockets or clocks.
//   - body.go: pure parsing: the subset hint, the OpenAI request body's model and
//     stream flag, the usage of an SSE or JSON answer, and re-chunking.
//   - pick.go: the Picker: the endpoints allowed (the Source's ∩ the subset hint), a
//     Turbine route through the model's Router grain for the endpoints that are Turbine
//     workers, the least loaded one for the others; leastLoaded and fallbacks are pure.
//   - turbine.go: the Turbine side over a cluster member (ClusterTurbine): the model
//     cards from the Catalog grain, tokenization by the gateway's own code path (chat
//     template and tokenizer from the card), Route, RouteAck and Free on the Router grain,
//     and the workers' engine endpoints from its Stats.
//   - server.go: the gRPC shell (Server): ext_proc Process, gRPC health (liveness,
//     readiness, the ext_proc service), optional TLS; metrics.go: its metric families.
//   - errors.go: the catalogue of the immediate responses (400, 404, 429, 500, 503) in
//     OpenAI's error shape.
//
// # Invariants
//
//   - Every request the Router grain tracked for a pick is freed exactly once: when the
//     response ends (body or trailers with end of stream), when the EPP answers with an
//     immediate response after the pick, or when the stream ends early (the gateway or
//     the client went away). The Machine reports it once in Step.Release.
//   - The request path's responses go out in the order headers, body chunks, trailers;
//     the header x-gateway-destination-endpoint and the envoy.lb dynamic metadata carry
//     the same value.
//   - No lock is held across a Router grain call.
package epp
