// Package resp serves a kvbm.Store over RESP2, the redis protocol subset that LMCache's
// redis://, unix:// and resp:// remote connectors, redis-cli, redis-benchmark and the
// usual redis client libraries use (docs/reference.md §9.3).
//
// Replies are byte-identical to redis-server 7.0 (Debian's) run with "databases 1" for
// the same input, protocol errors and quirks included, with the deviations listed in
// §9.3 (CLIENT SETINFO answers +OK as redis 7.2 does; SET refuses expiry options; HELLO
// speaks protocol 2 only; the key length bound).
//
// Pieces:
//   - Parser (parse.go): requests from a byte stream, multibulk and inline, as redis's
//     networking.c parses them. Each bulk argument lands in its own exact-size slice,
//     read from the socket once; SET hands that slice to Store.Put, which keeps it.
//   - session (commands.go): one connection's state (authenticated, name) and the
//     command table; it calls the store and writes replies, nothing else.
//   - replyWriter (reply.go): replies batched in a buffer; a large GET value is queued by
//     reference and written with the buffer in one writev, never copied.
//   - Server (server.go): the accept loop and one goroutine per connection. Replies are
//     flushed when every buffered request has been answered (before the next read) or
//     when 1 MiB is pending, so a pipelined batch costs one write.
//
// Invariants: a connection's requests run in order on its goroutine and their replies
// leave in that order; after a protocol error or QUIT nothing more is read, the pending
// replies are written and the connection is closed. No lock of the server is held while
// a command runs.
package resp
