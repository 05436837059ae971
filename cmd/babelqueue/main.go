// Command babelqueue is the BabelQueue command-line tool: a demo of the runtime on
// memory://, publish and consume on any broker URL, the operator's dead-letter tools
// (docs/operations.md), and the SDK version.
//
//	babelqueue demo
//	babelqueue publish -queue orders -urn urn:babel:orders:created -data '{"order_id":1042}' redis://127.0.0.1:6379/0
//	babelqueue consume -queue orders -n 10 amqp://guest:guest@127.0.0.1:5672/
//	babelqueue dlq stats -queue orders redis://127.0.0.1:6379/0
//	babelqueue dlq redrive -queue orders -select reason=failed -dry-run redis://127.0.0.1:6379/0
//	babelqueue bridge -queue orders amqp://guest:guest@127.0.0.1:5672/ kafka://127.0.0.1:9092
//	babelqueue tail -trace 8f0e… redis://127.0.0.1:6379/0#orders,orders.dlq
//	babelqueue stats -watch redis://127.0.0.1:6379/0#orders kafka://127.0.0.1:9092#events
//	babelqueue version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/babelqueue-go/babelqueue/examples/tour"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `babelqueue: the BabelQueue for Go command-line tool

Usage:
  babelqueue demo                               run a producer and workers on memory:// and show how each message settled
  babelqueue publish [flags] URL                publish one envelope
  babelqueue consume [flags] URL                print a queue's messages (and acknowledge them)
  babelqueue redrive [flags] URL                move dead-lettered messages back to their queue (= dlq redrive)
  babelqueue dlq stats|ls|show|redrive|export|purge|import URL[#queue]
                                                look into a dead-letter queue, put messages back, archive and remove them
  babelqueue bridge [flags] SRC_URL DST_URL     move (or -copy) a queue between two brokers, byte for byte
  babelqueue tail -trace ID URL[#queue,…]…      follow one trace across queues and brokers
  babelqueue console [flags] URL[#queue,…]…     serve the web console: queues, dead letters, redrive, live tail
  babelqueue stats [flags] URL[#queue,…]…       count what queues hold once, -watch them, or -listen to serve them to Prometheus
  babelqueue schema check -registry DIR FILE... validate envelopes or data files against a babelqueue-registry; warn where other SDKs differ
  babelqueue outbox relay -db DSN URL           publish the transactional outbox's rows (also: outbox migrate, outbox schema)
  babelqueue version                            print the SDK version

Run "babelqueue <command> -h" for a command's flags.
`

// run is the whole program, testable: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = tour.Run(ctx, stdout, args[1:])
	case "publish":
		err = publish(ctx, args[1:], stdout, stderr)
	case "consume":
		err = consume(ctx, args[1:], stdout, stderr)
	case "redrive":
		err = dlqRedrive(ctx, "redrive", args[1:], stdout, stderr)
	case "dlq":
		err = dlqCmd(ctx, args[1:], stdout, stderr)
	case "bridge":
		err = bridgeCmd(ctx, args[1:], stdout, stderr)
	case "tail":
		err = tailCmd(ctx, args[1:], stdout, stderr)
	case "console":
		err = consoleCmd(ctx, args[1:], stdout, stderr)
	case "stats":
		err = statsCmd(ctx, args[1:], stdout, stderr)
	case "schema":
		err = schemaCmd(ctx, args[1:], stdout, stderr)
	case "outbox":
		err = outboxCmd(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		err = version(stdout, args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "babelqueue: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var reported reportedError
	if errors.As(err, &reported) {
		return reported.code
	}
	var interrupted interruptedError
	if errors.As(err, &interrupted) {
		fmt.Fprintf(stderr, "babelqueue %s: %v\n", args[0], err)
		return 130
	}
	if err != nil {
		fmt.Fprintf(stderr, "babelqueue %s: %v\n", args[0], err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
