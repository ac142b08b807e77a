// Command render draws Turbine's Grafana dashboards as PNG images from real data, for
// docs/grafana.md, without Grafana: it starts turbine serve (disaggregated, with the
// planner and the KV block manager), runs turbine bench against it, scrapes /metrics
// every second into a Prometheus TSDB, evaluates every panel's own PromQL over the run
// with Prometheus' query engine, and draws the panels in the dashboard's grid layout.
//
//	go run ./deploy/grafana/render                          # ~2 min: record a run, draw docs/grafana/*.png
//	go run ./deploy/grafana/render -replay run.txt          # draw again from a recorded run
//	go run ./deploy/grafana/render -record run.txt -duration 60s
//
// The images are approximations of Grafana's rendering (gonum/plot, dark theme), not
// screenshots of Grafana.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

func main() {
	var o options
	flag.StringVar(&o.turbine, "turbine", "", "turbine binary to run (empty: go build ./cmd/turbine into a temp dir)")
	flag.StringVar(&o.dashboards, "dashboards", "deploy/grafana", "folder of the dashboard JSON files")
	flag.StringVar(&o.out, "out", "docs/grafana", "folder the PNG images are written to")
	flag.DurationVar(&o.duration, "duration", 90*time.Second, "length of the load (turbine bench --duration)")
	flag.StringVar(&o.record, "record", "", "also keep the recorded scrapes in this file (for -replay)")
	flag.StringVar(&o.replay, "replay", "", "draw from scrapes recorded earlier with -record instead of running a load")
	flag.DurationVar(&o.step, "step", 2*time.Second, "evaluation step of the range queries")
	flag.DurationVar(&o.rateInterval, "rate-interval", 10*time.Second, "value of $__rate_interval (the scrape interval is 1 s)")
	flag.IntVar(&o.width, "width", 1600, "image width in pixels (24 grid columns)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatalf("render: %v", err)
	}
}

type options struct {
	turbine, dashboards, out, record, replay string
	duration, step, rateInterval             time.Duration
	width                                    int
}

func run(ctx context.Context, o options) error {
	paths, err := filepath.Glob(filepath.Join(o.dashboards, "*.json"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("no dashboards in %s", o.dashboards)
	}
	var scrapes []scrape
	if o.replay != "" {
		scrapes, err = readScrapes(o.replay)
	} else {
		scrapes, err = recordRun(ctx, o)
		if err == nil && o.record != "" {
			err = writeScrapes(o.record, scrapes)
		}
	}
	if err != nil {
		return err
	}
	if len(scrapes) < 2 {
		return fmt.Errorf("%d scrapes recorded: too few to draw", len(scrapes))
	}
	db, err := load(scrapes)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	start, end := scrapes[0].at, scrapes[len(scrapes)-1].at
	sub := dashboard.DefaultSubstitution()
	sub["__rate_interval"] = o.rateInterval.String()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		d, err := dashboard.Parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		res, err := evaluate(ctx, db, d, sub, start.Add(o.rateInterval), end, o.step)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".json") + ".png"
		if err := drawDashboard(filepath.Join(o.out, name), d, res, o.width); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		log.Printf("wrote %s", filepath.Join(o.out, name))
	}
	return nil
}
