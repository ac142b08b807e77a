package resp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestGoRedis drives the kvbm with go-redis, in RESP3 mode (HELLO 3 is refused, the
// client falls back to RESP2) and RESP2 mode (HELLO 2), with a password.
func TestGoRedis(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) {
			addr := serve(t, New(newStore(t), Options{Password: "s3cret"}))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", Protocol: proto, ClientName: "worker-0", PoolSize: 4})
			defer c.Close()

			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING: %v", err)
			}
			if name, err := c.ClientGetName(ctx).Result(); err != nil || name != "worker-0" {
				t.Errorf("CLIENT GETNAME = %q, %v", name, err)
			}
			values := map[string][]byte{}
			pipe := c.Pipeline()
			for i := range 8 {
				k := fmt.Sprintf("vllm@m@1@0@%04x@bfloat16", i)
				values[k] = binValue(64<<10+i, uint64(i))
				pipe.Set(ctx, k+"kv_bytes", values[k], 0)
				pipe.Set(ctx, k+"metadata", values[k][:28], 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("pipelined SETs: %v", err)
			}
			for k, v := range values {
				if n, err := c.Exists(ctx, k+"metadata").Result(); err != nil || n != 1 {
					t.Errorf("EXISTS %s = %d, %v", k, n, err)
				}
				got, err := c.Get(ctx, k+"kv_bytes").Bytes()
				if err != nil || !bytes.Equal(got, v) {
					t.Errorf("GET %s: %d bytes, %v; want %d bytes", k, len(got), err, len(v))
				}
			}
			if _, err := c.Get(ctx, "missing").Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("GET missing: %v, want redis.Nil", err)
			}
			if r, err := c.SetArgs(ctx, "nx", "1", redis.SetArgs{Mode: "NX"}).Result(); err != nil || r != "OK" {
				t.Errorf("SET NX new = %q, %v", r, err)
			}
			if _, err := c.SetArgs(ctx, "nx", "2", redis.SetArgs{Mode: "NX"}).Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("SET NX existing: %v, want redis.Nil", err)
			}
			if vs, err := c.MGet(ctx, "nx", "missing").Result(); err != nil || len(vs) != 2 || vs[0] != "1" || vs[1] != nil {
				t.Errorf("MGET = %v, %v", vs, err)
			}
			if n, err := c.DBSize(ctx).Result(); err != nil || n != 17 {
				t.Errorf("DBSIZE = %d, %v; want 17", n, err)
			}
			if n, err := c.Del(ctx, "nx", "nx", "missing").Result(); err != nil || n != 1 {
				t.Errorf("DEL = %d, %v; want 1", n, err)
			}
			if err := c.Set(ctx, "ttl", "1", time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "syntax error") {
				t.Errorf("SET with EX: %v, want a syntax error", err)
			}
		})
	}
}

// TestRedisCLI: redis-cli prints the same for the kvbm as for redis-server, one command
// at a time and in --pipe mode with LMCache's redis:// sequence.
func TestRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (apt-get install -y redis-tools)")
	}
	redisAddr := startRedis(t)
	kvbmAddr := serve(t, New(newStore(t), Options{}))
	run := func(addr string, stdin []byte, args ...string) string {
		host, port, _ := net.SplitHostPort(addr)
		c := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...)
		c.Stdin = bytes.NewReader(stdin)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{
		{"PING"},
		{"SET", "k", "a\r\nb"},
		{"GET", "k"},
		{"--no-raw", "GET", "k"},
		{"EXISTS", "k", "k", "z"},
		{"MGET", "k", "z"},
		{"SELECT", "1"},
		{"-n", "0", "DBSIZE"},
		{"DEL", "k"},
		{"GET", "k"},
		{"NOSUCH", "x"},
	} {
		k, r := run(kvbmAddr, nil, args...), run(redisAddr, nil, args...)
		if k != r {
			t.Errorf("redis-cli %q: kvbm %q, redis-server %q", args, k, r)
		}
	}
	sc := loadScript(t, filepath.Join("testdata", "scripts", "lmcache-redis-chunk.txt"))
	k, r := run(kvbmAddr, sc.request, "--pipe"), run(redisAddr, sc.request, "--pipe")
	if k != r || !strings.Contains(k, "errors: 0, replies: 13") {
		t.Errorf("redis-cli --pipe: kvbm %q, redis-server %q", k, r)
	}
	if testing.Verbose() {
		fmt.Fprint(os.Stderr, k)
	}
}
