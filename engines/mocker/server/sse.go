package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// sseWriter writes a streamed answer as Server-Sent Events: each value as one
// "data: <json>" event, flushed as it is written, as the engines' servers do.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers 200 with contentType (the engine's own: "text/event-stream", with or
// without a charset) and returns the writer of the events.
func startSSE(w http.ResponseWriter, contentType string) *sseWriter {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes v as one event. It returns false when v cannot be encoded or the write or
// its flush fails (the client left).
func (s *sseWriter) send(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return false
	}
	err = s.rc.Flush()
	return err == nil || errors.Is(err, http.ErrNotSupported)
}

// done writes the "data: [DONE]" event that ends a stream.
func (s *sseWriter) done() { _, _ = io.WriteString(s.w, "data: [DONE]\n\n") }
