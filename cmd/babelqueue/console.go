package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/console"
)

const consoleUsage = `babelqueue console [flags] URL[#queue,queue…]…

Serve the web console (package console) for the brokers of the URLs: their queues
with depth, in flight and dead-letter depth, each dead-letter queue grouped by
reason, URN, producing language and error, the messages, redrives and deletions
with a dry run, exports, a live tail, a search by meta.id or trace_id. Each URL names
its queues after a #, or takes every -queue. It binds to loopback unless -listen says
otherwise, which needs -token or -basic. With -tls-cert and -tls-key it serves HTTPS,
and its session cookie is Secure. Logins, redrives, deletions and exports are logged
to stderr with who made them.

Flags:
`

func consoleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("console", stdout, stderr)
	fs := o.flags()
	fs.Usage = func() {
		fmt.Fprint(stderr, consoleUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8080", "the address to serve on; beyond loopback it needs -token or -basic")
	token := fs.String("token", os.Getenv("BQ_CONSOLE_TOKEN"), "require a login with this token (default $BQ_CONSOLE_TOKEN, which keeps it out of the process list)")
	basic := fs.String("basic", os.Getenv("BQ_CONSOLE_BASIC"), "require HTTP basic auth as user:password (default $BQ_CONSOLE_BASIC)")
	readOnly := fs.Bool("read-only", false, "refuse redrives, deletions and exports, and hide them")
	var queues queuesFlag
	fs.Var(&queues, "queue", "a work queue to show on every URL without its own #queue,… (repeatable)")
	interval := fs.Duration("interval", 5*time.Second, "how often the queues are counted for the rates and charts")
	grace := fs.Duration("grace", DefaultGrace, "after SIGTERM or Ctrl-C, how long the console may take to end its redrives, tails and requests and close before it exits without them")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain, leaf first); goes with -tls-key")
	tlsKey := fs.String("tls-key", "", "the PEM private key of -tls-cert")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o.finish(err)
	}
	if len(pos) == 0 {
		return o.finish(usageError{"want at least one broker URL (URL#queue,queue names the queues to show on it)"})
	}
	if *interval <= 0 {
		return o.finish(usageError{"-interval must be positive"})
	}
	if *grace <= 0 {
		return o.finish(usageError{"-grace must be positive"})
	}
	// Once the grace is over the process exits without closing (see graceful).
	over := false
	bound := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), d)
	}
	opts := []console.Option{console.WithSampleInterval(*interval)}
	switch {
	case *token != "" && *basic != "":
		return o.finish(usageError{"choose -token or -basic, not both"})
	case *token != "":
		opts = append(opts, console.WithToken(*token))
	case *basic != "":
		user, pass, ok := strings.Cut(*basic, ":")
		if !ok || user == "" || pass == "" {
			return o.finish(usageError{"-basic wants user:password"})
		}
		opts = append(opts, console.WithBasicAuth(user, pass))
	}
	if *readOnly {
		opts = append(opts, console.WithReadOnly())
	}
	scheme := "http"
	switch {
	case (*tlsCert == "") != (*tlsKey == ""):
		return o.finish(usageError{"-tls-cert and -tls-key go together"})
	case *tlsCert != "":
		cfg, err := console.LoadTLS(*tlsCert, *tlsKey)
		if err != nil {
			return o.finish(err)
		}
		opts = append(opts, console.WithTLSConfig(cfg))
		scheme = "https"
	}
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.json {
		h = slog.NewJSONHandler(stderr, nil)
	}
	opts = append(opts, console.WithLogger(slog.New(h)))

	var brokers []console.Broker
	for _, raw := range pos {
		u, frag := splitFragment(raw)
		names := []string(queues)
		if frag != "" {
			names = strings.Split(frag, ",")
		}
		var qs []console.Queue
		for _, q := range names {
			if q = strings.TrimSpace(q); q != "" {
				qs = append(qs, console.Queue{Name: q})
			}
		}
		b, err := o.open(ctx, u)
		if err != nil {
			return o.finish(err)
		}
		defer func() {
			if !over {
				cctx, cancel := bound(10 * time.Second)
				defer cancel()
				_ = b.tr.Close(cctx)
			}
		}()
		if len(qs) == 0 {
			return o.finish(usageError{fmt.Sprintf("%s: name its queues (%s#orders,payments, or -queue orders)", b.name(), b.name())})
		}
		brokers = append(brokers, console.Broker{URL: u, Transport: b.tr, Queues: qs})
	}
	c, err := console.New(brokers, opts...)
	if err != nil {
		return o.finish(err)
	}
	defer func() {
		if !over {
			_ = c.Close()
		}
	}()
	over, bound, err = graceful(ctx, *grace, func() error {
		return c.ListenAndServe(ctx, *listen, func(a net.Addr) {
			if !o.json {
				fmt.Fprintf(stderr, "babelqueue console on %s://%s/ (Ctrl-C to stop)\n", scheme, a)
			}
		})
	})
	if over {
		return o.finish(fmt.Errorf("the console did not stop within the -grace of %s after the interrupt "+
			"(a redrive, a page or a count waits on a broker that does not answer): exiting without it", *grace))
	}
	if err != nil {
		return o.finish(usageErrorIfAuth(err))
	}
	return nil
}

// usageErrorIfAuth makes a refusal to listen beyond loopback without a login a
// usage error (exit 2): the command line lacks -token or -basic.
func usageErrorIfAuth(err error) error {
	if errors.Is(err, console.ErrAuthRequired) {
		return usageError{err.Error() + " (-token or -basic)"}
	}
	return err
}
