package resp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/kvbm"
)

// The error replies, each the whole line without its "\r\n". Those marked "redis" are
// redis 7.0's exact text; the others are the kvbm's own (docs/reference.md §9.3).
const (
	errNoAuth       = "-NOAUTH Authentication required."                                                                                                                                                                               // redis
	errWrongPass    = "-WRONGPASS invalid username-password pair or user is disabled."                                                                                                                                                 // redis
	errNoPassword   = "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"                                                                                  // redis
	errHelloNoAuth  = "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time" // redis
	errNoProto      = "-NOPROTO unsupported protocol version"                                                                                                                                                                          // redis
	errHelloVersion = "-ERR Protocol version is not an integer or out of range"                                                                                                                                                        // redis
	errSyntax       = "-ERR syntax error"                                                                                                                                                                                              // redis
	errNotInteger   = "-ERR value is not an integer or out of range"                                                                                                                                                                   // redis
	errIntRange     = "-ERR value is out of range, value must between -2147483648 and 2147483647"                                                                                                                                      // redis
	errDBIndex      = "-ERR DB index is out of range"                                                                                                                                                                                  // redis, as with "databases 1"
	errClientName   = "-ERR Client names cannot contain spaces, newlines or special characters."                                                                                                                                       // redis
	errMaxClients   = "-ERR max number of clients reached"                                                                                                                                                                             // redis
	errOOM          = "-OOM command not allowed when used memory > 'maxmemory'."                                                                                                                                                       // redis
	errStoreClosed  = "-ERR kvbm block store closed"
	errValueLarge   = "-ERR kvbm value too large for the block store"
	errEmptyKey     = "-ERR kvbm empty key (a block needs a name)"
)

// errLine builds "-ERR <msg>" from a formatted message the way redis's
// addReplyErrorFormat does: \r and \n become blanks.
func errLine(format string, args ...any) string {
	return "-ERR " + string(sanitize([]byte(fmt.Sprintf(format, args...))))
}

// errArity is redis's wrong-arity error; name is the command's full name ("get",
// "client|setname").
func errArity(name string) string {
	return "-ERR wrong number of arguments for '" + name + "' command"
}

// errKeyTooLong refuses a key of n bytes over the limit max.
func errKeyTooLong(n, max int) string {
	return fmt.Sprintf("-ERR kvbm key too long (%d bytes, at most %d)", n, max)
}

// cstr is b as C's string functions see it: up to its first NUL byte.
func cstr(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// trunc cuts b to at most n bytes (printf's "%.Ns").
func trunc(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// errUnknownCommand is redis's unknown-command error: the name and the first arguments,
// each cut at a NUL byte, at most 128 bytes of arguments.
func errUnknownCommand(argv [][]byte) string {
	var args strings.Builder
	for i := 1; i < len(argv) && args.Len() < 128; i++ {
		limit := 128 - args.Len()
		args.WriteByte('\'')
		args.Write(trunc(cstr(argv[i]), limit))
		args.WriteString("' ")
	}
	return errLine("unknown command '%s', with args beginning with: %s", trunc(cstr(argv[0]), 128), args.String())
}

// errUnknownSubcommand is redis's error for a container command's unknown subcommand.
func errUnknownSubcommand(argv [][]byte) string {
	return errLine("unknown subcommand '%s'. Try %s HELP.", trunc(cstr(argv[1]), 128), strings.ToUpper(string(cstr(argv[0]))))
}

// storeErr maps an error of kvbm.Store to its reply: ErrFull is redis's OOM error (so
// clients treat it as a full server), the others an -ERR naming the cause.
func storeErr(err error) string {
	switch {
	case errors.Is(err, kvbm.ErrFull):
		return errOOM
	case errors.Is(err, kvbm.ErrClosed):
		return errStoreClosed
	case errors.Is(err, kvbm.ErrValueTooLarge):
		return errValueLarge
	case errors.Is(err, kvbm.ErrKeyTooLong):
		return "-ERR kvbm key too long for the block store"
	default:
		return errLine("kvbm %s", err.Error())
	}
}
