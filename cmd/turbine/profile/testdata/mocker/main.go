// Command mocker is `turbine mocker` alone, for the profiler's tests: they build it
// without the race detector, so that the mock engines they profile keep to their timing
// model as the turbine binary's do. It takes `mocker` as its first argument, as the
// turbine binary does.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/turbine-llm/turbine/cmd/turbine/mocker"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "mocker" {
		fmt.Fprintln(os.Stderr, "usage: mocker mocker [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := mocker.Run(ctx, os.Args[2:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "turbine mocker:", err)
		os.Exit(1)
	}
}
