package kvbm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

const crashDirEnv = "TURBINE_KVBM_CRASH_DIR"

// crashBlock is the content the crash child puts under key i: 64 to 256 KiB.
func crashBlock(i int) (key string, data []byte) {
	key = "crash/" + strconv.Itoa(i)
	return key, block(key, i, 64<<10+(i*37%4)*(64<<10))
}

// TestCrashChild is the child of TestCrashKill: it puts blocks in a loop and prints each
// acknowledged key. It does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs as TestCrashKill's child only")
	}
	start, _ := strconv.Atoi(os.Getenv(crashDirEnv + "_START"))
	s, err := Open(Config{HostBytes: 4 << 20, DiskDir: dir, DiskBytes: 1 << 30, Policy: PolicyWriteThrough, Sync: true})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := start; ; i++ {
		key, data := crashBlock(i)
		if err := s.Put(key, []byte(key), data, 0); err != nil {
			fmt.Fprintln(w, "error:", err)
			_ = w.Flush()
			os.Exit(2)
		}
		fmt.Fprintln(w, "acked", key)
		_ = w.Flush()
	}
}

// TestCrashKill kills (SIGKILL) a process putting blocks mid-write (a temporary file
// present), twice, and checks that
// every block it acknowledged is there byte-exact after a restart, that no torn block is
// served, and that no temporary file survives Open.
func TestCrashKill(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	if testing.Short() {
		t.Skip("-short: the kill test runs child processes for seconds")
	}
	dir := t.TempDir()
	var acked []string
	next := 0
	for round := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashDirEnv+"_START="+strconv.Itoa(next))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			line := sc.Text()
			if k, ok := strings.CutPrefix(line, "acked "); ok {
				acked = append(acked, k)
				n++
				if n == 25+10*round {
					killMidWrite(t, cmd, dir)
				}
				continue
			}
			if strings.HasPrefix(line, "error:") || strings.HasPrefix(line, "open:") {
				t.Fatalf("child: %s", line)
			}
		}
		_ = cmd.Wait()
		if n < 25+10*round {
			t.Fatalf("round %d: the child acknowledged %d blocks and stopped", round, n)
		}
		next += n + 1 // the child was killed in or after put next+n
	}

	temps := 0
	for _, name := range dirNames(t, dir) {
		if strings.HasSuffix(name, tempExt) {
			temps++
		}
	}
	s := mustOpen(t, Config{HostBytes: 4 << 20, DiskDir: dir, DiskBytes: 1 << 30, Policy: PolicyWriteThrough})
	defer s.Close()
	for _, name := range dirNames(t, dir) {
		if strings.HasSuffix(name, tempExt) {
			t.Errorf("temporary file %s survived Open", name)
		}
	}
	want := map[string][]byte{}
	for i := range next {
		k, d := crashBlock(i)
		want[k] = d
	}
	for _, k := range acked {
		e, err := s.Get(k)
		if err != nil || !bytes.Equal(e.Data, want[k]) || string(e.Meta) != k {
			t.Errorf("acknowledged %s: %v, or not its bytes", k, err)
		}
	}
	// Whatever else the inventory holds (a put done but not yet acknowledged) is whole.
	var keys []string
	s.Snapshot(func(key string, tier kv.Tier) {
		if tier == kv.TierDisk {
			keys = append(keys, key)
		}
	})
	for _, k := range keys {
		e, err := s.Get(k)
		if err != nil || !bytes.Equal(e.Data, want[k]) {
			t.Errorf("%s: %v, or torn", k, err)
		}
	}
	t.Logf("%d blocks acknowledged, %d held after two kills, %d temporary files left by them", len(acked), len(keys), temps)
}

// killMidWrite SIGKILLs cmd as soon as a temporary file shows in dir (a put mid-write;
// the child fsyncs, so the window is wide), or after a bounded number of looks.
func killMidWrite(t *testing.T, cmd *exec.Cmd, dir string) {
	for range 20000 {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), tempExt) {
				_ = cmd.Process.Kill()
				return
			}
		}
	}
	t.Log("no write caught in flight: killed between puts")
	_ = cmd.Process.Kill()
}
