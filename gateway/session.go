package gateway

import (
	"crypto/sha256"
	"encoding/hex"
)

// Client sessions (docs/reference.md §3.5): a request names its conversation
// with an x-session-id header or the body's `user` (chat, completions, Responses;
// Anthropic's metadata.user_id), the header winning. The router remembers the worker
// a session's last request went to and lets its policy weigh keeping the conversation
// there (RouteRequest session_id). The id is never sent to an engine.

// SessionHeader is the request header naming the client's session.
const SessionHeader = "X-Session-Id"

// MaxSessionIDBytes bounds a session id as the router keeps it; a longer one is
// replaced by "sha256:" and the hex SHA-256 of it (71 bytes), so that any client's
// `user` still names one session without a client-chosen size in the router's memory.
const MaxSessionIDBytes = 256

// sessionID is a request's session: the header's value when set, else the body's
// user, bounded by MaxSessionIDBytes; "" for none.
func sessionID(header, user string) string {
	id := header
	if id == "" {
		id = user
	}
	if len(id) > MaxSessionIDBytes {
		sum := sha256.Sum256([]byte(id))
		id = "sha256:" + hex.EncodeToString(sum[:])
	}
	return id
}

// setSession gives every engine request of p (each prompt of a batch) the session id.
func (p *prepared) setSession(id string) {
	if id == "" {
		return
	}
	p.gen.SessionID = id
	for _, g := range p.more {
		g.SessionID = id
	}
}
