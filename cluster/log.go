package cluster

import (
	"context"
	"log/slog"
	"strings"

	"github.com/rs/zerolog"
)

// zerologHandler adapts slog records from the actor library to zerolog; it keeps warnings
// and errors only, since the library is chatty at info level (docs/actor-library.md §14).
type zerologHandler struct {
	log   zerolog.Logger
	attrs []slog.Attr
}

func (h zerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h zerologHandler) Handle(_ context.Context, r slog.Record) error {
	var ev *zerolog.Event
	if r.Level >= slog.LevelError {
		ev = h.log.Error()
	} else {
		ev = h.log.Warn()
	}
	for _, a := range h.attrs {
		ev = ev.Str(a.Key, a.Value.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Str(a.Key, a.Value.String())
		return true
	})
	ev.Msg(strings.TrimSpace(r.Message))
	return nil
}

func (h zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return zerologHandler{log: h.log, attrs: append(append([]slog.Attr{}, h.attrs...), attrs...)}
}

func (h zerologHandler) WithGroup(string) slog.Handler { return h }
