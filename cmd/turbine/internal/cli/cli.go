// Package cli holds what every turbine subcommand shares: environment-variable defaults
// for flags, logger set-up and signal handling.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// EnvName is the environment variable that sets flag name: TURBINE_ + the name in upper
// case with '-' as '_' (e.g. --max-num-seqs ↔ TURBINE_MAX_NUM_SEQS).
func EnvName(flagName string) string {
	return "TURBINE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse applies environment variables to fs's flags, then parses args (flags given on
// the command line win). Errors name the flag or variable that was wrong.
func Parse(fs *flag.FlagSet, args []string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v (it sets --%s: %s; default %q)", EnvName(f.Name), v, e, f.Name, f.Usage, f.DefValue)
			}
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}

// ParseCommand is Parse for a subcommand that takes no positional arguments. It returns
// help=true (and no error) when -h was asked for, so the caller returns at once.
func ParseCommand(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q (every setting is a --flag)", fs.Arg(0))
	}
	return false, nil
}

// Logger returns the process logger: console format when w is a terminal (or format is
// "console"), JSON otherwise; level is a zerolog level name.
func Logger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	var out io.Writer = w
	switch format {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	case "", "auto":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want auto, json or console", format)
	}
	// Millisecond timestamps: member and engine events are seconds apart or less.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// SignalContext returns a context cancelled on SIGINT or SIGTERM.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}
