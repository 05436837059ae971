package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

// The operating commands (dlq, bridge, tail) share the helpers of this file: flags
// after the arguments, --json on every one, errors that name the broker without its
// password.

// reportedError is an error a command already wrote out (as JSON); run exits with its
// code without printing it again.
type reportedError struct{ code int }

func (e reportedError) Error() string { return fmt.Sprintf("reported (exit %d)", e.code) }

// out is where an operating command writes, and how.
type out struct {
	cmd            string
	json           bool
	stdout, stderr io.Writer
}

func newOut(cmd string, stdout, stderr io.Writer) *out {
	return &out{cmd: cmd, stdout: stdout, stderr: stderr}
}

// flags returns a flag set for the command with --json.
func (o *out) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(o.cmd, flag.ContinueOnError)
	fs.SetOutput(o.stderr)
	fs.BoolVar(&o.json, "json", false, "write JSON (one document, or one per line for streams) instead of text")
	return fs
}

// emit writes v as one line of JSON on stdout.
func (o *out) emit(v any) error {
	enc := json.NewEncoder(o.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// finish turns a command's error into what run reports: with --json the error is
// written as {"error": …} on stderr here.
func (o *out) finish(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) || !o.json {
		return err
	}
	code := 1
	var ue usageError
	if errors.As(err, &ue) {
		code = 2
	}
	var ie interruptedError
	if errors.As(err, &ie) {
		code = 130
	}
	enc := json.NewEncoder(o.stderr)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"command": o.cmd, "error": err.Error()})
	return reportedError{code: code}
}

// interruptedError ends a command that Ctrl-C stopped after it said what it did.
type interruptedError struct{ what string }

func (e interruptedError) Error() string { return "interrupted: " + e.what }

// parseArgs parses fs from args, allowing flags after the positional arguments (as in
// "dlq stats URL --json"), and returns the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// broker is an open connection to one broker URL.
type broker struct {
	url string // as given, for scrubbing errors
	tr  transport.Transport
}

// name is the broker URL without its password.
func (b *broker) name() string { return transport.Redact(b.url) }

// wrap names the broker in err and makes sure its password is not in it.
func (b *broker) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &brokerError{broker: b.name(), err: err, secret: secretOf(b.url)}
}

// brokerError is a failure that names the broker, password redacted.
type brokerError struct {
	broker string
	err    error
	secret string
}

func (e *brokerError) Error() string {
	msg := e.err.Error()
	if e.secret != "" {
		msg = strings.ReplaceAll(msg, e.secret, "xxxxx")
	}
	if strings.Contains(msg, e.broker) {
		return msg // the driver named the broker already
	}
	return e.broker + ": " + msg
}

func (e *brokerError) Unwrap() error { return e.err }

// secretOf returns the password of raw, when it has one long enough to scrub.
func secretOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	if p, ok := u.User.Password(); ok && len(p) >= 3 {
		return p
	}
	return ""
}

// open connects to the broker of raw. Its warnings go to stderr.
func (o *out) open(ctx context.Context, raw string) (*broker, error) {
	b := &broker{url: raw}
	var h slog.Handler = slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	if o.json {
		h = slog.NewJSONHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tr, err := transport.Open(transport.ContextWithLogger(octx, slog.New(h)), raw)
	if err != nil {
		return nil, b.wrap(err)
	}
	b.tr = tr
	return b, nil
}

// close closes the broker connection, within ten seconds.
func (b *broker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.tr.Close(ctx)
}

// queueFlags are the flags that name a dead-letter queue.
type queueFlags struct {
	queue, dlq string
}

func (q *queueFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&q.queue, "queue", "default", "the work queue whose dead-letter queue this is (the DLQ's name is the broker's: <queue>.dlq, <queue>-dlq on SQS)")
	fs.StringVar(&q.dlq, "dlq", "", "the dead-letter queue itself, when it is not named after -queue")
}

// name returns the dead-letter queue on b.
func (q *queueFlags) name(b *broker) string {
	if q.dlq != "" {
		return q.dlq
	}
	return dlq.QueueFor(q.queue, b.tr.Capabilities())
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// keyView shows a record key in JSON: nil is no key, and bytes that are not UTF-8
// are base64.
type keyView struct {
	Key       *string `json:"key"`
	KeyBase64 string  `json:"key_base64,omitempty"`
}

func viewKey(k []byte) keyView {
	if k == nil {
		return keyView{}
	}
	if utf8.Valid(k) {
		s := string(k)
		return keyView{Key: &s}
	}
	return keyView{KeyBase64: base64.StdEncoding.EncodeToString(k)}
}

// textKey shows a record key in text.
func textKey(k []byte) string {
	switch {
	case k == nil:
		return "none"
	case utf8.Valid(k):
		return fmt.Sprintf("%q", k)
	default:
		return "base64:" + base64.StdEncoding.EncodeToString(k)
	}
}

// onlyURLs checks that every positional argument is there.
func wantArgs(pos []string, n int, what string) error {
	if len(pos) != n {
		return usageError{fmt.Sprintf("want %s, got %d argument(s)", what, len(pos))}
	}
	return nil
}
