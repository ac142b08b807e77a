// Package tracing is Turbine's OpenTelemetry tracing (docs/tracing.md): the SDK set up
// from the --otlp-* flags (Setup: an OTLP exporter over HTTP or gRPC chosen by the
// endpoint's scheme, a batch span processor, W3C TraceContext and Baggage propagators),
// the names of every span, event and attribute Turbine records, and the helpers that
// start spans and carry a trace across actor messages (a W3C traceparent string in
// RouteRequest.traceparent and Generate.traceparent) and into engine HTTP requests.
//
// # Off costs nothing
//
// Tracing is off until Setup is given an endpoint (or Install a provider, in tests).
// While off, Enabled is false, every helper returns at once without allocating, and
// callers guard their attribute building with Enabled (or a nil span holder), so a
// request pays one atomic load per instrumented point (BenchmarkRequestTracingOff).
// A TracerProvider installed globally by other code is not used while Turbine's tracing
// is off.
//
// # Span tree of one request
//
//	gateway.receive (server; the client's traceparent is its parent)
//	├── preprocess        chat template and tokenization
//	├── route             the frontend's Route call to the model's Router grain
//	│   └── router.route  (in the grain's process, from RouteRequest.traceparent)
//	├── prefill           the prefill leg of a disaggregated request
//	│   └── worker.generate (from Generate.traceparent; engine HTTP carries traceparent)
//	└── decode            the worker leg: first_token and migration events
//	    └── worker.generate
//
// Every route after a migration or a prefill retry is another route span, each leg
// another prefill or decode span.
package tracing
