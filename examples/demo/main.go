// Command demo is "make demo": the main job of BabelQueue for Go on the embedded
// default broker, memory://. It lives in the root module and imports no broker
// client, so "go run ./examples/demo" compiles only the standard library and the SDK.
// The same demo is "babelqueue demo" in cmd/babelqueue.
//
//	go run ./examples/demo [-v]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/babelqueue-go/babelqueue/examples/tour"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := tour.Run(ctx, os.Stdout, os.Args[1:]); err != nil {
		stop()
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}
