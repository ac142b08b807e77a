package resp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kvbm"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected replies of testdata/scripts (from redis-server where the script says it matches)")

// A script is one connection's request bytes and the replies expected for them, read
// from testdata/scripts/*.txt:
//
//	# comment
//	option password s3cret         both servers: AUTH required (redis: --requirepass)
//	option max-bulk 1048576        both servers: bulk bound (redis: --proto-max-bulk-len)
//	option max-key 16              the kvbm's key bound (redis has none: say "differs")
//	redis differs: <why>           redis-server 7.0 answers otherwise (checked: it must)
//	end close                      the server must close on its own
//	end eof                        the test half-closes after writing and reads to EOF
//	                               (for a script that ends inside a request; keep its
//	                               replies small: redis drops unsent output at EOF)
//	                               (default: an ECHO of a marker follows the script, and
//	                               the replies are read up to the marker's)
//	send ARG ...                   one multibulk request; ARG is a bare word, a Go-quoted
//	                               string, bin(n,seed) (n pseudo-random bytes with "\r\n"
//	                               every 997 bytes) or rep(n,"s") (s n times)
//	raw ARG ...                    the ARGs' bytes as they are (inline commands, bad frames)
//	times N send|raw ...           the directive N times
//	----
//	expected replies, rendered: one Go-quoted line per "\r\n"-ended piece, or
//	"<n bytes sha256:...>" for a piece over 120 bytes
type script struct {
	path       string
	password   string
	maxBulk    int64
	maxKey     int
	differs    string
	end        string // "", "close" or "eof"
	request    []byte
	head, want string
}

func loadScript(t *testing.T, path string) *script {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	head, want, ok := strings.Cut(text, "\n----\n")
	if !ok {
		head = strings.TrimSuffix(text, "----\n")
	}
	sc := &script{path: path, head: strings.TrimRight(head, "\n"), want: want}
	for i, line := range strings.Split(head, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := sc.directive(line); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
	}
	return sc
}

func (sc *script) directive(line string) error {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "option":
		name, val, _ := strings.Cut(rest, " ")
		switch name {
		case "password":
			sc.password = val
		case "max-bulk":
			n, err := strconv.ParseInt(val, 10, 64)
			sc.maxBulk = n
			return err
		case "max-key":
			n, err := strconv.Atoi(val)
			sc.maxKey = n
			return err
		default:
			return fmt.Errorf("unknown option %q", name)
		}
	case "redis":
		why, ok := strings.CutPrefix(rest, "differs:")
		if !ok {
			return fmt.Errorf("want 'redis differs: <why>'")
		}
		sc.differs = strings.TrimSpace(why)
	case "end":
		if rest != "close" && rest != "eof" {
			return fmt.Errorf("unknown end %q", rest)
		}
		sc.end = rest
	case "times":
		n, d, _ := strings.Cut(rest, " ")
		count, err := strconv.Atoi(n)
		if err != nil {
			return err
		}
		for range count {
			if err := sc.directive(d); err != nil {
				return err
			}
		}
	case "send", "raw":
		args, err := scriptArgs(rest)
		if err != nil {
			return err
		}
		if word == "raw" {
			sc.request = append(sc.request, bytes.Join(args, nil)...)
			return nil
		}
		sc.request = appendCommand(sc.request, args...)
	default:
		return fmt.Errorf("unknown directive %q", word)
	}
	return nil
}

// appendCommand appends args as a RESP multibulk request.
func appendCommand(dst []byte, args ...[]byte) []byte {
	dst = fmt.Appendf(dst, "*%d\r\n", len(args))
	for _, a := range args {
		dst = fmt.Appendf(dst, "$%d\r\n", len(a))
		dst = append(dst, a...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// binValue is n pseudo-random bytes from seed, with "\r\n" every 997 bytes.
func binValue(n int, seed uint64) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	for i := 5; i+1 < n; i += 997 {
		b[i], b[i+1] = '\r', '\n'
	}
	return b
}

func scriptArgs(s string) ([][]byte, error) {
	var args [][]byte
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return args, nil
		}
		switch {
		case s[0] == '"':
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, err
			}
			u, _ := strconv.Unquote(q)
			args = append(args, []byte(u))
			s = s[len(q):]
		case strings.HasPrefix(s, "bin(") || strings.HasPrefix(s, "rep("):
			end := strings.Index(s, ")")
			if end < 0 {
				return nil, fmt.Errorf("unclosed %q", s)
			}
			n, p, _ := strings.Cut(s[4:end], ",")
			count, err := strconv.Atoi(n)
			if err != nil {
				return nil, err
			}
			if s[0] == 'b' {
				seed, err := strconv.ParseUint(p, 10, 64)
				if err != nil {
					return nil, err
				}
				args = append(args, binValue(count, seed))
			} else {
				u, err := strconv.Unquote(p)
				if err != nil {
					return nil, err
				}
				args = append(args, bytes.Repeat([]byte(u), count))
			}
			s = s[end+1:]
		default:
			w, rest, _ := strings.Cut(s, " ")
			args = append(args, []byte(w))
			s = rest
		}
	}
}

// render is the readable form of reply bytes that the scripts' expected section holds:
// one Go-quoted line per "\r\n"-ended line, a bulk's payload as one item, and an item
// over 120 bytes as "<n bytes sha256:...>".
func render(b []byte) string {
	var out strings.Builder
	item := func(piece []byte) {
		if len(piece) > 120 {
			h := sha256.Sum256(piece)
			fmt.Fprintf(&out, "<%d bytes sha256:%s>\n", len(piece), hex.EncodeToString(h[:8]))
		} else {
			out.WriteString(strconv.Quote(string(piece)) + "\n")
		}
	}
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			item(b)
			break
		}
		line := b[:i+2]
		item(line)
		b = b[len(line):]
		if line[0] == '$' {
			if n, err := strconv.Atoi(string(line[1:i])); err == nil && n >= 0 && n+2 <= len(b) {
				item(b[:n+2])
				b = b[n+2:]
			}
		}
	}
	return out.String()
}

// The marker request that ends a script (end mode ""), and its reply.
var (
	markerRequest = appendCommand(nil, []byte("ECHO"), []byte("--end of script--"))
	markerReply   = []byte("$17\r\n--end of script--\r\n")
)

// exchange writes req on a new connection to addr and returns the server's replies; end
// says how they end (see script).
func exchange(t *testing.T, network, addr string, req []byte, end string) []byte {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(req)
		switch {
		case err != nil:
		case end == "":
			_, err = c.Write(markerRequest)
		case end == "eof":
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		werr <- err
	}()
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if end == "" && bytes.HasSuffix(got, markerReply) {
			got = got[:len(got)-len(markerReply)]
			break
		}
		if errors.Is(err, io.EOF) && end != "" {
			break
		}
		if err != nil {
			t.Fatalf("reading the replies: %v (after %s)", err, render(got))
		}
	}
	if err := <-werr; err != nil && end != "close" {
		t.Fatalf("writing the request: %v", err)
	}
	return got
}

// startKvbm serves a fresh store with the script's options on TCP and a Unix socket.
func startKvbm(t *testing.T, o Options) (tcp, unix string) {
	t.Helper()
	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(st, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "kvbm.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ln) }()
	go func() { done <- srv.Serve(uln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
		_ = st.Close()
	})
	return ln.Addr().String(), sock
}

// startRedis starts Debian's redis-server (7.0) on a free port with the given extra
// arguments, skipping the test when it is not installed.
func startRedis(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install -y redis-server redis-tools): no differential check against redis")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	all := append([]string{"--save", "", "--appendonly", "no", "--port", strconv.Itoa(port),
		"--bind", "127.0.0.1", "--databases", "1", "--daemonize", "no", "--logfile", ""}, args...)
	cmd := exec.Command(bin, all...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	var log []string
	for sc.Scan() {
		log = append(log, sc.Text())
		if strings.Contains(sc.Text(), "Ready to accept connections") {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
	}
	t.Fatalf("redis-server did not start:\n%s", strings.Join(log, "\n"))
	return ""
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/scripts/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			sc := loadScript(t, path)
			o := Options{Password: sc.password, MaxValueBytes: sc.maxBulk, MaxKeyBytes: sc.maxKey}
			tcp, _ := startKvbm(t, o)
			got := exchange(t, "tcp", tcp, sc.request, sc.end)
			_, unix := startKvbm(t, o)
			if u := exchange(t, "unix", unix, sc.request, sc.end); !bytes.Equal(u, got) {
				t.Errorf("the Unix socket answers otherwise than TCP:\nunix:\n%s\ntcp:\n%s", render(u), render(got))
			}
			var fromRedis []byte
			haveRedis := false
			if _, err := exec.LookPath("redis-server"); err == nil {
				var args []string
				if sc.password != "" {
					args = append(args, "--requirepass", sc.password)
				}
				if sc.maxBulk > 0 {
					args = append(args, "--proto-max-bulk-len", strconv.FormatInt(sc.maxBulk, 10))
				}
				fromRedis = exchange(t, "tcp", startRedis(t, args...), sc.request, sc.end)
				haveRedis = true
			}
			if *rewrite {
				want := got
				if haveRedis && sc.differs == "" {
					want = fromRedis
				}
				if err := os.WriteFile(path, []byte(sc.head+"\n----\n"+render(want)), 0o644); err != nil {
					t.Fatal(err)
				}
				sc.want = render(want)
			}
			if r := render(got); r != sc.want {
				t.Errorf("kvbm replies:\n%s\nwant:\n%s", r, sc.want)
			}
			switch {
			case !haveRedis:
				t.Log("redis-server not installed (apt-get install -y redis-server): compared with the expected replies only")
			case sc.differs == "" && !bytes.Equal(got, fromRedis):
				t.Errorf("kvbm and redis-server differ:\nkvbm:\n%s\nredis-server:\n%s", render(got), render(fromRedis))
			case sc.differs != "" && bytes.Equal(got, fromRedis):
				t.Errorf("the script says redis differs (%s), but redis-server answers the same", sc.differs)
			}
		})
	}
}
