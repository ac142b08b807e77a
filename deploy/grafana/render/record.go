package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// scrape is one /metrics page and when it was read.
type scrape struct {
	at   time.Time
	text []byte
}

// serveArgs is the service the images show: one prefill and two decode workers with
// small KV caches (so that blocks spill to the block manager), the load planner and the
// block manager, every port free.
var serveArgs = []string{
	"serve", "--port", "0",
	"--prefill-workers", "1", "--decode-workers", "2",
	"--planner", "load", "--gpu-budget", "4",
	"--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "0",
	"--num-gpu-blocks", "1024", "--block-size", "16", "--max-model-len", "8192",
	"--kv-bytes-per-token", "4096", "--drain-timeout", "2s",
}

// recordRun starts turbine serve, runs turbine bench against it for o.duration (plus a
// few deliberate errors: a request for an unknown model and a client that leaves, every
// 5 s), and returns a scrape of /metrics per second from the start of the load until a
// few seconds after it.
func recordRun(ctx context.Context, o options) ([]scrape, error) {
	bin := o.turbine
	tmp, err := os.MkdirTemp("", "turbine-render-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		bin = filepath.Join(tmp, "turbine")
		log.Printf("building ./cmd/turbine")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/turbine")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/turbine: %w", err)
		}
	}
	base, stopServe, err := startServe(ctx, bin, filepath.Join(tmp, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer stopServe()
	log.Printf("turbine serve at %s; load for %s", base, o.duration)

	cl := &http.Client{Timeout: 10 * time.Second}
	scrapeCtx, stopScrapes := context.WithCancel(ctx)
	scraped := make(chan []scrape)
	go func() {
		var all []scrape
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if b, err := get(cl, base+"/metrics"); err == nil {
				all = append(all, scrape{at: time.Now(), text: b})
			}
			select {
			case <-scrapeCtx.Done():
				scraped <- all
				return
			case <-tick.C:
			}
		}
	}()

	noiseCtx, stopNoise := context.WithCancel(ctx)
	go noise(noiseCtx, base)
	bench := exec.CommandContext(ctx, bin, "bench", "--url", base, "--model", "turbine-mock",
		"--duration", o.duration.String(), "--rate", "2.5",
		"--isl", "normal:1536:256", "--osl", "normal:96:32",
		"--shared-prefix-groups", "6", "--shared-prefix-tokens", "1024",
		"--out", filepath.Join(tmp, "bench"))
	bench.Stdout, bench.Stderr = os.Stderr, os.Stderr
	benchErr := bench.Run()
	stopNoise()
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	stopScrapes()
	all := <-scraped
	if benchErr != nil {
		return nil, fmt.Errorf("turbine bench: %w", benchErr)
	}
	return all, nil
}

// noise sends, every 5 s, a request for a model nobody serves (404) and a stream whose
// client leaves after its first chunk, so that the error panels show real errors.
func noise(ctx context.Context, base string) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		post(ctx, base, `{"model":"no-such-model","prompt":"hello","max_tokens":4}`, false)
		post(ctx, base, `{"model":"turbine-mock","prompt":"a client that leaves","max_tokens":2000,"ignore_eos":true,"stream":true}`, true)
	}
}

func post(ctx context.Context, base, body string, leave bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if leave {
		_, _ = bufio.NewReader(resp.Body).ReadString('\n')
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
}

func get(cl *http.Client, url string) ([]byte, error) {
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// startServe starts turbine serve, its log in logPath, and returns its URL once it logs
// "turbine serving".
func startServe(ctx context.Context, bin, logPath string) (string, func(), error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, serveArgs...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TURBINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logf.Write(append(line, '\n'))
			var rec struct{ Message, URL string }
			if bytes.Contains(line, []byte("turbine serving")) && json.Unmarshal(line, &rec) == nil && rec.URL != "" {
				select {
				case url <- rec.URL:
				default:
				}
			}
		}
		logf.Close()
	}()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	select {
	case u := <-url:
		return u, stop, nil
	case <-exited:
		return "", nil, fmt.Errorf("turbine serve exited before serving (log: %s)", logPath)
	case <-time.After(90 * time.Second):
		stop()
		return "", nil, errors.New("turbine serve not serving after 90 s")
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}

// The recording format: each scrape is a line "# SCRAPE <unix ms>" followed by the
// /metrics page as read.
const scrapeMark = "# SCRAPE "

func writeScrapes(path string, ss []scrape) error {
	var b bytes.Buffer
	for _, s := range ss {
		fmt.Fprintf(&b, "%s%d\n", scrapeMark, s.at.UnixMilli())
		b.Write(s.text)
		if len(s.text) > 0 && s.text[len(s.text)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func readScrapes(path string) ([]scrape, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseScrapes(b)
}

// parseScrapes reads the recording format writeScrapes writes.
func parseScrapes(b []byte) ([]scrape, error) {
	var out []scrape
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte("\n"))
		b = rest
		if ms, ok := bytes.CutPrefix(line, []byte(scrapeMark)); ok {
			n, err := strconv.ParseInt(string(ms), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("scrapes: bad timestamp %q", ms)
			}
			out = append(out, scrape{at: time.UnixMilli(n)})
			continue
		}
		if len(out) == 0 {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			return nil, errors.New("scrapes: data before the first " + strings.TrimSpace(scrapeMark) + " line")
		}
		last := &out[len(out)-1]
		last.text = append(append(last.text, line...), '\n')
	}
	return out, nil
}
