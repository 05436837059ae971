package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

const dlqUsage = `babelqueue dlq: look into a dead-letter queue and put messages back

Usage:
  babelqueue dlq stats   [flags] URL[#queue]      counts by reason, URN, language, original queue, error
  babelqueue dlq ls      [flags] URL[#queue]      list the messages with their dead_letter block
  babelqueue dlq show    [flags] URL[#queue] ID   one message (ID: its meta.id, or #N for the N-th)
  babelqueue dlq redrive [flags] URL[#queue]      move messages back to the queue they failed on
  babelqueue dlq export  [flags] URL[#queue]      write messages, byte for byte, as JSON lines (they stay)
  babelqueue dlq purge   [flags] URL[#queue]      remove messages (a dry run unless -yes; -export archives first)
  babelqueue dlq import  [flags] FILE URL[#queue] write an export back, every write confirmed

URL#orders, like -queue orders, means the dead-letter queue of orders (orders.dlq;
orders-dlq on SQS); URL#orders.dlq, like -dlq orders.dlq, names it itself. Every
command takes -select clauses (see "babelqueue dlq redrive -h") and -json. stats,
ls, show and export never consume a message.
`

func dlqCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, dlqUsage)
		return usageError{"dlq: want a subcommand: stats, ls, show, redrive, export, purge or import"}
	}
	switch args[0] {
	case "stats":
		return dlqStats(ctx, args[1:], stdout, stderr)
	case "ls", "list":
		return dlqList(ctx, args[1:], stdout, stderr)
	case "show":
		return dlqShow(ctx, args[1:], stdout, stderr)
	case "redrive":
		return dlqRedrive(ctx, "dlq redrive", args[1:], stdout, stderr)
	case "export":
		return dlqExport(ctx, args[1:], stdout, stderr)
	case "purge":
		return dlqPurge(ctx, args[1:], stdout, stderr)
	case "import":
		return dlqImport(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, dlqUsage)
		return nil
	default:
		fmt.Fprint(stderr, dlqUsage)
		return usageError{fmt.Sprintf("dlq: unknown subcommand %q", args[0])}
	}
}

// selectFlag collects repeated -select clauses.
type selectFlag []string

func (s *selectFlag) String() string     { return strings.Join(*s, " ") }
func (s *selectFlag) Set(v string) error { *s = append(*s, v); return nil }

func (s selectFlag) parse() (dlq.Select, error) {
	if len(s) == 0 {
		return nil, nil
	}
	sel, err := dlq.ParseSelect(s, time.Now())
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return sel, nil
}

func registerSelect(fs *flag.FlagSet, s *selectFlag) {
	fs.Var(s, "select", "only the messages a clause selects; repeat for more clauses (all must hold):\n"+indent(dlq.SelectHelp, "  "))
}

func indent(s, pfx string) string {
	return pfx + strings.ReplaceAll(s, "\n", "\n"+pfx)
}

// openDLQ parses a dlq subcommand's flags and opens its broker.
func openDLQ(ctx context.Context, o *out, fs *flag.FlagSet, args []string, q *queueFlags, nargs int, what string) (*broker, string, []string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, "", nil, err
	}
	if err := wantArgs(pos, nargs, what); err != nil {
		return nil, "", nil, err
	}
	raw, frag, err := oneQueue(pos[0])
	if err != nil {
		return nil, "", nil, err
	}
	b, err := o.open(ctx, raw)
	if err != nil {
		return nil, "", nil, err
	}
	if err := q.fromURL(fs, frag, b); err != nil {
		b.close()
		return nil, "", nil, err
	}
	return b, q.name(b), pos, nil
}

// openSelected is openDLQ for the subcommands that take -select: it parses the
// selection too, and closes the broker when the selection is wrong.
func openSelected(ctx context.Context, o *out, fs *flag.FlagSet, args []string, q *queueFlags, sel *selectFlag) (*broker, string, dlq.Select, error) {
	b, name, _, err := openDLQ(ctx, o, fs, args, q, 1, "one broker URL")
	if err != nil {
		return nil, "", nil, err
	}
	s, err := sel.parse()
	if err != nil {
		b.close()
		return nil, "", nil, err
	}
	return b, name, s, nil
}

// statsView is what dlq stats writes with -json.
type statsView struct {
	Broker string `json:"broker"`
	dlq.Stats
}

func dlqStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq stats", stdout, stderr)
	fs := o.flags()
	var q queueFlags
	var sel selectFlag
	q.register(fs)
	registerSelect(fs, &sel)
	b, name, s, err := openSelected(ctx, o, fs, args, &q, &sel)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	st, err := dlq.Collect(ctx, b.tr, name, s)
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if o.json {
		return o.finish(o.emit(statsView{Broker: b.name(), Stats: st}))
	}
	w := stdout
	fmt.Fprintf(w, "Dead-letter queue %s on %s\n", name, b.name())
	fmt.Fprintf(w, "%d message(s)", st.Total)
	if st.Poison > 0 {
		fmt.Fprintf(w, ", %d poison", st.Poison)
	}
	if st.Oldest != nil {
		fmt.Fprintf(w, ", dead-lettered from %s to %s", stamp(*st.Oldest), stamp(*st.Newest))
	}
	fmt.Fprintln(w)
	for _, sec := range []struct {
		title  string
		groups []dlq.Group
		none   string
	}{
		{"By reason", st.Reasons, "(no dead_letter block)"},
		{"By URN", st.URNs, "(not an envelope)"},
		{"By producing language", st.Langs, "(not an envelope)"},
		{"By original queue", st.OriginalQueues, "(not given)"},
		{"By error (numbers and ids masked)", st.Errors, "(no error text)"},
	} {
		if len(sec.groups) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", sec.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, g := range sec.groups {
			key := g.Key
			if key == "" {
				key = sec.none
			}
			span := ""
			if g.Oldest != nil {
				span = stamp(*g.Oldest) + " … " + stamp(*g.Newest)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", g.Count, key, span)
			if g.Example != "" && g.Example != g.Key {
				fmt.Fprintf(tw, "  \t  e.g. %s\t\n", oneLine(g.Example, 120))
			}
		}
		_ = tw.Flush()
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n]) + "…"
	}
	return s
}

// entryView is a dead-lettered message in JSON.
type entryView struct {
	Position int    `json:"position,omitempty"`
	ID       string `json:"id,omitempty"`
	URN      string `json:"urn,omitempty"`
	TraceID  string `json:"trace_id,omitempty"`
	Lang     string `json:"lang,omitempty"`
	Attempts *int   `json:"attempts,omitempty"`
	Poison   bool   `json:"poison"`
	Wrapped  bool   `json:"wrapped,omitempty"`
	keyView
	Headers     map[string]string `json:"headers,omitempty"`
	DeadLetter  *deadLetterView   `json:"dead_letter"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Data        json.RawMessage   `json:"data,omitempty"`
	// Body is the raw body (show -raw): a string when it is UTF-8, else BodyBase64.
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"body_base64,omitempty"`
}

type deadLetterView struct {
	Reason        string  `json:"reason"`
	Error         *string `json:"error"`
	Exception     *string `json:"exception"`
	FailedAt      int64   `json:"failed_at"`
	OriginalQueue string  `json:"original_queue"`
	Attempts      int     `json:"attempts"`
	Lang          string  `json:"lang"`
}

func view(e *dlq.Entry, pos int) entryView {
	v := entryView{
		Position: pos, ID: e.ID(), URN: e.URN(), TraceID: e.TraceID(), Lang: e.Lang(),
		Poison: e.Poison, Wrapped: e.Wrapped, keyView: viewKey(e.Delivery.Key),
		Headers: e.Delivery.Headers, Fingerprint: e.Fingerprint(),
	}
	if e.Envelope != nil {
		n := e.Envelope.Attempts
		v.Attempts = &n
	}
	if dl := e.DeadLetter; dl != nil {
		v.DeadLetter = &deadLetterView{
			Reason: dl.Reason, Error: dl.Error, Exception: dl.Exception, FailedAt: dl.FailedAt,
			OriginalQueue: dl.OriginalQueue, Attempts: dl.Attempts, Lang: dl.Lang,
		}
	}
	return v
}

type listView struct {
	Broker  string      `json:"broker"`
	Queue   string      `json:"queue"`
	Entries []entryView `json:"entries"`
	Next    string      `json:"next,omitempty"`
	End     bool        `json:"end"`
}

func dlqList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq ls", stdout, stderr)
	fs := o.flags()
	var q queueFlags
	var sel selectFlag
	q.register(fs)
	registerSelect(fs, &sel)
	limit := fs.Int("limit", 50, "list at most this many messages")
	cursor := fs.String("cursor", "", "start where an earlier listing's next page begins (its \"next\")")
	b, name, s, err := openSelected(ctx, o, fs, args, &q, &sel)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	if *limit < 1 {
		return o.finish(usageError{"-limit must be at least 1"})
	}
	p, err := dlq.List(ctx, b.tr, name, transport.Cursor(*cursor), *limit, s)
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if o.json {
		lv := listView{Broker: b.name(), Queue: name, Entries: []entryView{}, End: p.End}
		if !p.End {
			lv.Next = string(p.Next)
		}
		for i, e := range p.Entries {
			lv.Entries = append(lv.Entries, view(e, i+1))
		}
		return o.finish(o.emit(lv))
	}
	fmt.Fprintf(stdout, "Dead-letter queue %s on %s\n", name, b.name())
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tREASON\tURN\tLANG\tFAILED AT\tID\tERROR")
	for i, e := range p.Entries {
		at := "-"
		if t := e.FailedAt(); !t.IsZero() {
			at = stamp(t)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, orDash(e.Reason()), orDash(e.URN()), orDash(e.Lang()), at, orDash(e.ID()), oneLine(e.Error(), 80))
	}
	_ = tw.Flush()
	if p.End {
		fmt.Fprintf(stdout, "%d message(s), end of the queue\n", len(p.Entries))
	} else {
		fmt.Fprintf(stdout, "%d message(s); next page: -cursor %s\n", len(p.Entries), p.Next)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dlqShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq show", stdout, stderr)
	fs := o.flags()
	var q queueFlags
	q.register(fs)
	raw := fs.Bool("raw", false, "write the message body exactly as the broker holds it, and nothing else (with -json: add it to the document)")
	b, name, pos, err := openDLQ(ctx, o, fs, args, &q, 2, "a broker URL and a message (its meta.id, or #N)")
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	e, err := findEntry(ctx, b, name, pos[1])
	if err != nil {
		return o.finish(err)
	}
	if o.json {
		v := view(e, 0)
		if e.Envelope != nil {
			v.Data = e.Envelope.Data
		}
		if *raw {
			if utf8.Valid(e.Delivery.Body) {
				s := string(e.Delivery.Body)
				v.Body = &s
			} else {
				v.BodyBase64 = base64.StdEncoding.EncodeToString(e.Delivery.Body)
			}
		}
		return o.finish(o.emit(v))
	}
	if *raw {
		_, err := stdout.Write(e.Delivery.Body)
		return err
	}
	printEntry(stdout, name, e)
	return nil
}

// findEntry looks a message up by meta.id, or by its place (#N, from 1) in the queue.
func findEntry(ctx context.Context, b *broker, queue, id string) (*dlq.Entry, error) {
	if n, ok := strings.CutPrefix(id, "#"); ok {
		at, err := strconv.Atoi(n)
		if err != nil || at < 1 {
			return nil, usageError{fmt.Sprintf("%q: want #N with N from 1", id)}
		}
		i := 0
		var found *dlq.Entry
		err = transport.BrowseAll(ctx, b.tr, queue, dlq.PageSize, func(d *transport.Delivery) bool {
			i++
			if i == at {
				found = dlq.Read(d)
				return false
			}
			return true
		})
		if err != nil {
			return nil, b.wrap(err)
		}
		if found == nil {
			return nil, fmt.Errorf("%s holds %d message(s), no #%d", queue, i, at)
		}
		return found, nil
	}
	e, err := dlq.Find(ctx, b.tr, queue, id)
	if err != nil {
		return nil, b.wrap(err)
	}
	if e == nil {
		return nil, fmt.Errorf("no message with meta.id %q on %s", id, queue)
	}
	return e, nil
}

func printEntry(w io.Writer, queue string, e *dlq.Entry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if e.Envelope != nil {
		fmt.Fprintf(w, "Message %s (%s) on %s\n", e.ID(), e.URN(), queue)
		fmt.Fprintf(tw, "  trace_id\t%s\n  lang\t%s\n  created_at\t%s\n  attempts\t%d\n", e.TraceID(), e.Lang(),
			stamp(time.UnixMilli(e.Envelope.Meta.CreatedAt)), e.Envelope.Attempts)
	} else {
		kind := "poison"
		if e.Wrapped {
			kind = "poison, wrapped"
		}
		fmt.Fprintf(w, "Message on %s: not an envelope (%s)\n", queue, kind)
	}
	fmt.Fprintf(tw, "  key\t%s\n", textKey(e.Delivery.Key))
	keys := make([]string, 0, len(e.Delivery.Headers))
	for k := range e.Delivery.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "  header\t%s=%s\n", k, e.Delivery.Headers[k])
	}
	_ = tw.Flush()
	if dl := e.DeadLetter; dl != nil {
		fmt.Fprintln(w, "Dead letter")
		nullable := func(s *string) string {
			if s == nil {
				return "null"
			}
			return *s
		}
		at := "-"
		if t := e.FailedAt(); !t.IsZero() {
			at = fmt.Sprintf("%s (%s ago)", stamp(t), time.Since(t).Round(time.Second))
		}
		fmt.Fprintf(tw, "  reason\t%s\n  error\t%s\n  exception\t%s\n  failed_at\t%s\n  original_queue\t%s\n  attempts\t%d\n  lang\t%s\n",
			dl.Reason, nullable(dl.Error), nullable(dl.Exception), at, dl.OriginalQueue, dl.Attempts, dl.Lang)
		_ = tw.Flush()
	} else {
		fmt.Fprintln(w, "Dead letter: none (no dead_letter block)")
	}
	switch {
	case e.Envelope != nil:
		fmt.Fprintln(w, "Data")
		var b bytes.Buffer
		if json.Indent(&b, e.Envelope.Data, "  ", "  ") == nil {
			fmt.Fprintf(w, "  %s\n", b.Bytes())
		} else {
			fmt.Fprintf(w, "  %s\n", e.Envelope.Data)
		}
	case e.Original != nil && utf8.Valid(e.Original):
		fmt.Fprintf(w, "Original body (%d bytes)\n  %s\n", len(e.Original), e.Original)
	case e.Original != nil:
		fmt.Fprintf(w, "Original body (%d bytes, not UTF-8; base64)\n  %s\n", len(e.Original), base64.StdEncoding.EncodeToString(e.Original))
	}
	fmt.Fprintln(w, "(-raw writes the body exactly as stored)")
}

// redriveView is what dlq redrive writes with -json.
type redriveView struct {
	Broker string `json:"broker"`
	dlq.Result
	KeptWhy map[string]int `json:"kept_why"`
	Items   []dlq.Item     `json:"items"`
}

func dlqRedrive(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	o := newOut(cmd, stdout, stderr)
	fs := o.flags()
	var q queueFlags
	var sel selectFlag
	q.register(fs)
	fs.StringVar(&q.dlq, "dead-letter-queue", "", "same as -dlq")
	registerSelect(fs, &sel)
	dry := fs.Bool("dry-run", false, "say what would move and change nothing (browses the queue)")
	to := fs.String("to", "", "move every message to this queue instead of the queue it failed on")
	maxN := fs.Int("max", 0, "move at most this many messages (0: no limit)")
	fs.IntVar(maxN, "n", 0, "same as -max")
	bypass := fs.Bool("bypass", false, "stamp bq-replay-bypass: 1, so handlers can skip side effects that already happened (babelqueue.IsReplay)")
	poison := fs.Bool("poison", false, "redrive poison messages too, as their original bytes")
	idle := fs.Duration("idle", 2*time.Second, "stop once the dead-letter queue gave nothing for this long")
	b, name, s, err := openSelected(ctx, o, fs, args, &q, &sel)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	if *maxN < 0 {
		return o.finish(usageError{"-max must not be negative"})
	}
	opts := []dlq.Option{dlq.WithMax(*maxN), dlq.WithIdle(*idle)}
	if s != nil {
		opts = append(opts, dlq.WithSelect(s))
	}
	if *dry {
		opts = append(opts, dlq.WithDryRun())
	}
	if *to != "" {
		opts = append(opts, dlq.WithTarget(*to))
	}
	if *bypass {
		opts = append(opts, dlq.WithBypass())
	}
	if *poison {
		opts = append(opts, dlq.WithPoison())
	}
	label := "redrive " + name
	if *dry {
		label = "dry run " + name
	}
	pb := newBar(stderr, label)
	why := map[string]int{}
	var items []dlq.Item
	var last dlq.Progress
	opts = append(opts, dlq.WithProgress(func(p dlq.Progress) {
		last = p
		if p.Last.Action == dlq.Kept {
			why[p.Last.Why]++
		} else {
			items = append(items, p.Last)
		}
		pb.update(p.Moved, p.Planned, fmt.Sprintf("kept %d", p.Kept))
	}))
	res, err := dlq.Redrive(ctx, b.tr, name, opts...)
	pb.finish(res.Moved, last.Planned, fmt.Sprintf("kept %d", res.Kept))
	if o.json {
		if items == nil {
			items = []dlq.Item{}
		}
		if eerr := o.emit(redriveView{Broker: b.name(), Result: res, KeptWhy: why, Items: items}); eerr != nil {
			return eerr
		}
	} else {
		printRedrive(stdout, b, res, why)
	}
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if res.Stopped == dlq.StopInterrupted {
		return o.finish(interruptedError{fmt.Sprintf("moved %d message(s) before it stopped; nothing was lost", res.Moved)})
	}
	return nil
}

func printRedrive(w io.Writer, b *broker, res dlq.Result, why map[string]int) {
	verb := "moved"
	if res.DryRun {
		verb = "dry run: would move"
	}
	fmt.Fprintf(w, "%s %d message(s) from %s on %s", verb, res.Moved, res.Queue, b.name())
	if len(res.To) > 0 {
		var parts []string
		for q, n := range res.To {
			parts = append(parts, fmt.Sprintf("%d to %s", n, q))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	if res.Kept > 0 {
		var parts []string
		for k, n := range why {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "kept %d on %s: %s\n", res.Kept, res.Queue, strings.Join(parts, "; "))
	}
	switch res.Stopped {
	case dlq.StopInterrupted:
		fmt.Fprintf(w, "interrupted: the %d message(s) above were moved (each confirmed before it left %s); every other message is still on %s\n", res.Moved, res.Queue, res.Queue)
	case dlq.StopMax:
		fmt.Fprintln(w, "stopped at -max")
	case dlq.StopError:
		fmt.Fprintf(w, "stopped by an error; the message in hand is still on %s\n", res.Queue)
	}
	if res.DryRun {
		fmt.Fprintln(w, "nothing was changed")
	}
}
