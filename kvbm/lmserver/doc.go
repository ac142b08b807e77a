// Package lmserver serves LMCache's lm:// remote-tier protocol (version 1) over a
// kvbm.Store, so that an unmodified vLLM + LMCache with remote_url lm://host:port (or
// production-stack's cache server deployment) uses a Turbine node as its remote tier
// (docs/reference.md §9.4).
//
// Pieces:
//   - protocol.go: the pure framing. A 186-byte request header (nine little-endian int32s:
//     command, length, fmt, dtype, location, shape0..3; then the key, space-padded to 150
//     bytes) and a 36-byte reply header (code, length, fmt, dtype, shape0..3, location),
//     the 32-byte descriptor stored with each block, and the v0 (158-byte header) check.
//   - server.go: the shell. One goroutine per connection reads requests and answers them
//     in order; PUT bodies are read straight into the buffer the store keeps; a GET hit is
//     written as one writev of the reply header and the stored bytes.
//   - client.go: a client of the same protocol (LMCache's lm_connector in Go), used by the
//     tests, the mock engine and load generators.
//
// Invariants: the Store is authoritative; the server keeps no block state of its own.
// Replies on a connection come back in request order, which is the only way an LMCache
// client matches them (the protocol has no request id). A connection whose framing can
// no longer be trusted (a negative or oversized length, a v0 or garbled header, a
// truncated frame) is closed; other connections are unaffected.
package lmserver
