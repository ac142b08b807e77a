package resp

import (
	"crypto/subtle"
	"errors"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// blockStore is what the commands need of kvbm.Store (a fake in tests).
type blockStore interface {
	Put(key string, meta, data []byte, priority int) error
	Get(key string) (kvbm.Entry, error)
	Exists(key string) bool
	Delete(key string) (bool, error)
	Snapshot(fn func(key string, tier kv.Tier))
	Stats() kvbm.Stats
}

// command is one entry of the command table. arity follows redis: n > 0 exactly n
// arguments (the name included), n < 0 at least -n.
type command struct {
	name   string // redis's full name: "get", "client|setname"
	arity  int
	noAuth bool // allowed before AUTH
	keys   func(argv [][]byte) [][]byte
	run    func(s *session, argv [][]byte)
	sub    map[string]*command // a container command's subcommands
}

// commands is the command table, keyed by lower-case name. QUIT is not in it: redis 7.0
// answers it before the lookup, whatever its arguments.
var commands = map[string]*command{}

func init() {
	for _, c := range []*command{
		{name: "ping", arity: -1, run: cmdPing},
		{name: "echo", arity: 2, run: cmdEcho},
		{name: "auth", arity: -2, noAuth: true, run: cmdAuth},
		{name: "hello", arity: -1, noAuth: true, run: cmdHello},
		{name: "select", arity: 2, run: cmdSelect},
		{name: "client", arity: -2, sub: subcommands("client",
			&command{name: "setname", arity: 3, run: cmdClientSetname},
			&command{name: "getname", arity: 2, run: cmdClientGetname},
			&command{name: "id", arity: 2, run: cmdClientID},
			&command{name: "setinfo", arity: 4, run: cmdClientSetinfo},
			&command{name: "help", arity: 2, run: cmdClientHelp},
		)},
		{name: "command", arity: -1, run: cmdCommand, sub: subcommands("command",
			&command{name: "count", arity: 2, run: cmdCommandCount},
			&command{name: "docs", arity: -2, run: cmdCommandDocs},
		)},
		{name: "get", arity: 2, keys: oneKey, run: cmdGet},
		{name: "set", arity: -3, keys: oneKey, run: cmdSet},
		{name: "exists", arity: -2, keys: allKeys, run: cmdExists},
		{name: "del", arity: -2, keys: allKeys, run: cmdDel},
		{name: "mget", arity: -2, keys: allKeys, run: cmdMget},
		{name: "dbsize", arity: 1, run: cmdDbsize},
		{name: "flushdb", arity: -1, run: cmdFlush},
		{name: "flushall", arity: -1, run: cmdFlush},
		{name: "info", arity: -1, run: cmdInfo},
	} {
		commands[c.name] = c
	}
}

func subcommands(container string, cs ...*command) map[string]*command {
	m := make(map[string]*command, len(cs))
	for _, c := range cs {
		m[c.name] = c
		c.name = container + "|" + c.name
	}
	return m
}

func oneKey(argv [][]byte) [][]byte  { return argv[1:2] }
func allKeys(argv [][]byte) [][]byte { return argv[1:] }

// asciiLower returns b with A-Z lowered (C's tolower), as a string.
func asciiLower(b []byte) string {
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			out := make([]byte, len(b))
			for i, c := range b {
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				out[i] = c
			}
			return string(out)
		}
	}
	return string(b)
}

// equalFoldC is C's strcasecmp(a, b) == 0 for a NUL-free b.
func equalFoldC(a []byte, b string) bool {
	a = cstr(a)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x >= 'A' && x <= 'Z' {
			x += 'a' - 'A'
		}
		if y >= 'A' && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// session is one connection's state and its command execution: the pure part of the
// server (no sockets; the store and the reply writer are its only effects).
type session struct {
	st       blockStore
	cfg      *config
	out      *replyWriter
	id       int64
	authed   bool
	name     string
	libName  string
	libVer   string
	quitting bool // close once the replies are written
	counters *counters
}

// exec runs one request; argv from Parser.Next. The checks run in redis 7.0's order:
// QUIT, lookup (unknown command or subcommand), arity, authentication, key length.
func (s *session) exec(argv [][]byte) {
	if len(argv) == 0 {
		return
	}
	s.counters.commands.Add(1)
	if equalFoldC(argv[0], "quit") {
		s.out.simple("OK")
		s.quitting = true
		return
	}
	base := commands[asciiLower(argv[0])]
	cmd := base
	if base != nil && base.sub != nil && len(argv) > 1 {
		cmd = base.sub[asciiLower(argv[1])]
	}
	switch {
	case cmd == nil && base != nil:
		s.out.errorLine(errUnknownSubcommand(argv))
		return
	case cmd == nil:
		s.out.errorLine(errUnknownCommand(argv))
		return
	case (cmd.arity > 0 && cmd.arity != len(argv)) || len(argv) < -cmd.arity:
		s.out.errorLine(errArity(cmd.name))
		return
	case !s.authed && !cmd.noAuth:
		s.out.errorLine(errNoAuth)
		return
	}
	if cmd.keys != nil {
		for _, k := range cmd.keys(argv) {
			if len(k) > s.cfg.maxKeyBytes {
				s.out.errorLine(errKeyTooLong(len(k), s.cfg.maxKeyBytes))
				return
			}
		}
	}
	if cmd.run == nil { // a container called with its name alone and arity allowing it
		s.out.errorLine(errUnknownCommand(argv))
		return
	}
	cmd.run(s, argv)
}

func cmdPing(s *session, argv [][]byte) {
	switch len(argv) {
	case 1:
		s.out.simple("PONG")
	case 2:
		s.out.bulk(argv[1])
	default:
		s.out.errorLine(errArity("ping"))
	}
}

func cmdEcho(s *session, argv [][]byte) { s.out.bulk(argv[1]) }

// checkPassword reports whether user and password authenticate. With no password set the
// only user, "default", takes any password (redis's nopass default user).
func (s *session) checkPassword(user, password []byte) bool {
	if string(user) != "default" {
		return false
	}
	if s.cfg.password == "" {
		return true
	}
	return subtle.ConstantTimeCompare(password, []byte(s.cfg.password)) == 1
}

func cmdAuth(s *session, argv [][]byte) {
	var user, pass []byte
	switch len(argv) {
	case 2:
		if s.cfg.password == "" {
			s.out.errorLine(errNoPassword)
			return
		}
		user, pass = []byte("default"), argv[1]
	case 3:
		user, pass = argv[1], argv[2]
	default:
		s.out.errorLine(errSyntax)
		return
	}
	if !s.checkPassword(user, pass) {
		s.out.errorLine(errWrongPass)
		return
	}
	s.authed = true
	s.out.simple("OK")
}

// cmdHello answers HELLO as redis 7.0 does, for protocol 2 only: HELLO 3 gets redis's
// NOPROTO error, which clients take as "RESP2 only".
func cmdHello(s *session, argv [][]byte) {
	next := 1
	if len(argv) >= 2 {
		v, ok := string2ll(argv[1])
		if !ok {
			s.out.errorLine(errHelloVersion)
			return
		}
		if v != 2 {
			s.out.errorLine(errNoProto)
			return
		}
		next = 2
	}
	var user, pass, name []byte
	setName := false
	for j := next; j < len(argv); j++ {
		more := len(argv) - 1 - j
		switch opt := argv[j]; {
		case equalFoldC(opt, "auth") && more >= 2:
			user, pass = argv[j+1], argv[j+2]
			j += 2
		case equalFoldC(opt, "setname") && more >= 1:
			name, setName = argv[j+1], true
			if !validName(name) {
				s.out.errorLine(errClientName)
				return
			}
			j++
		default:
			s.out.errorLine(errLine("Syntax error in HELLO option '%s'", cstr(opt)))
			return
		}
	}
	if user != nil {
		if !s.checkPassword(user, pass) {
			s.out.errorLine(errWrongPass)
			return
		}
		s.authed = true
	}
	if !s.authed {
		s.out.errorLine(errHelloNoAuth)
		return
	}
	if setName {
		s.name = string(name)
	}
	s.out.arrayLen(14)
	s.out.bulkString("server")
	s.out.bulkString("redis")
	s.out.bulkString("version")
	s.out.bulkString(redisVersion)
	s.out.bulkString("proto")
	s.out.integer(2)
	s.out.bulkString("id")
	s.out.integer(s.id)
	s.out.bulkString("mode")
	s.out.bulkString("standalone")
	s.out.bulkString("role")
	s.out.bulkString("master")
	s.out.bulkString("modules")
	s.out.arrayLen(0)
}

// cmdSelect accepts database 0 only, as redis configured with "databases 1".
func cmdSelect(s *session, argv [][]byte) {
	v, ok := string2ll(argv[1])
	switch {
	case !ok:
		s.out.errorLine(errNotInteger)
	case v < -1<<31 || v > 1<<31-1:
		s.out.errorLine(errIntRange)
	case v != 0:
		s.out.errorLine(errDBIndex)
	default:
		s.out.simple("OK")
	}
}

// validName is redis's rule for client names and CLIENT SETINFO values: printable
// ASCII, no blanks.
func validName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func cmdClientSetname(s *session, argv [][]byte) {
	if !validName(argv[2]) {
		s.out.errorLine(errClientName)
		return
	}
	s.name = string(argv[2])
	s.out.simple("OK")
}

func cmdClientGetname(s *session, _ [][]byte) {
	if s.name == "" {
		s.out.null()
		return
	}
	s.out.bulkString(s.name)
}

func cmdClientID(s *session, _ [][]byte) { s.out.integer(s.id) }

// cmdClientSetinfo is CLIENT SETINFO as redis 7.2 has it (redis 7.0 lacks it; redis-py
// and go-redis send it on connect and ignore an error).
func cmdClientSetinfo(s *session, argv [][]byte) {
	attr := argv[2]
	var dst *string
	switch {
	case equalFoldC(attr, "lib-name"):
		dst = &s.libName
	case equalFoldC(attr, "lib-ver"):
		dst = &s.libVer
	default:
		s.out.errorLine(errLine("Unrecognized option '%s'", cstr(attr)))
		return
	}
	if !validName(argv[3]) {
		s.out.errorLine(errLine("%s cannot contain spaces, newlines or special characters.", cstr(attr)))
		return
	}
	*dst = string(argv[3])
	s.out.simple("OK")
}

func cmdClientHelp(s *session, _ [][]byte) {
	lines := []string{
		"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GETNAME",
		"    Return the name of the current connection.",
		"ID",
		"    Return the ID of the current connection.",
		"SETINFO <option> <value>",
		"    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
		"SETNAME <name>",
		"    Assign the name <name> to the current connection.",
		"HELP",
		"    Print this help.",
	}
	s.out.arrayLen(len(lines))
	for _, l := range lines {
		s.out.simple(l)
	}
}

// cmdCommand answers COMMAND with an empty list: the kvbm publishes no command docs.
func cmdCommand(s *session, _ [][]byte) { s.out.arrayLen(0) }

func cmdCommandCount(s *session, _ [][]byte) { s.out.integer(int64(len(commands) + 1)) } // QUIT included

func cmdCommandDocs(s *session, _ [][]byte) { s.out.arrayLen(0) }

func cmdGet(s *session, argv [][]byte) {
	e, err := s.st.Get(string(argv[1]))
	switch {
	case errors.Is(err, kvbm.ErrNotFound):
		s.out.null()
	case err != nil:
		s.out.errorLine(storeErr(err))
	default:
		s.out.bulk(e.Data)
	}
}

// cmdSet is SET key value [NX|XX] [GET] [KEEPTTL]: the options redis 7.0 parses, bar
// expiry. EX, PX, EXAT and PXAT get redis's syntax error (blocks do not expire; the
// store evicts). NX and XX are checked, then the put is done: not atomic against a SET
// of the same key on another connection.
func cmdSet(s *session, argv [][]byte) {
	var nx, xx, get bool
	for _, opt := range argv[3:] {
		o := cstr(opt)
		switch {
		case equalFoldC(o, "nx") && !xx:
			nx = true
		case equalFoldC(o, "xx") && !nx:
			xx = true
		case equalFoldC(o, "get"):
			get = true
		case equalFoldC(o, "keepttl"):
		default:
			s.out.errorLine(errSyntax)
			return
		}
	}
	if len(argv[1]) == 0 {
		s.out.errorLine(errEmptyKey)
		return
	}
	key := string(argv[1])
	var old []byte
	found := false
	if get {
		e, err := s.st.Get(key)
		switch {
		case errors.Is(err, kvbm.ErrNotFound):
		case err != nil:
			s.out.errorLine(storeErr(err))
			return
		default:
			old, found = e.Data, true
		}
	} else if nx || xx {
		found = s.st.Exists(key)
	}
	if (nx && found) || (xx && !found) {
		s.replyOld(get, found, old)
		if !get {
			s.out.null()
		}
		return
	}
	if err := s.st.Put(key, nil, argv[2], 0); err != nil {
		s.out.errorLine(storeErr(err))
		return
	}
	if get {
		s.replyOld(get, found, old)
		return
	}
	s.out.simple("OK")
}

func (s *session) replyOld(get, found bool, old []byte) {
	switch {
	case !get:
	case found:
		s.out.bulk(old)
	default:
		s.out.null()
	}
}

func cmdExists(s *session, argv [][]byte) {
	var n int64
	for _, k := range argv[1:] {
		if s.st.Exists(string(k)) {
			n++
		}
	}
	s.out.integer(n)
}

func cmdDel(s *session, argv [][]byte) {
	var n int64
	for _, k := range argv[1:] {
		ok, err := s.st.Delete(string(k))
		if err != nil {
			s.out.errorLine(storeErr(err))
			return
		}
		if ok {
			n++
		}
	}
	s.out.integer(n)
}

func cmdMget(s *session, argv [][]byte) {
	s.out.arrayLen(len(argv) - 1)
	for _, k := range argv[1:] {
		e, err := s.st.Get(string(k))
		if err != nil {
			s.out.null()
			continue
		}
		s.out.bulk(e.Data)
	}
}

// keyCount is the number of blocks the store holds.
func keyCount(st blockStore) int64 {
	var n int64
	st.Snapshot(func(string, kv.Tier) { n++ })
	return n
}

func cmdDbsize(s *session, _ [][]byte) { s.out.integer(keyCount(s.st)) }

// cmdFlush is FLUSHDB and FLUSHALL [SYNC|ASYNC]: every block is deleted, in every tier.
func cmdFlush(s *session, argv [][]byte) {
	if len(argv) > 2 || (len(argv) == 2 && !equalFoldC(argv[1], "sync") && !equalFoldC(argv[1], "async")) {
		s.out.errorLine(errSyntax)
		return
	}
	var keys []string
	s.st.Snapshot(func(k string, _ kv.Tier) { keys = append(keys, k) })
	for _, k := range keys {
		if _, err := s.st.Delete(k); err != nil {
			s.out.errorLine(storeErr(err))
			return
		}
	}
	s.out.simple("OK")
}
