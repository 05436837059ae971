package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
)

// dlq export, dlq purge and dlq import: archive dead letters, discard them, and write
// an archive back (package dlq's Export, Purge and Import).

// exportFile opens path to write an export to: created with mode 0600 (dead letters
// may hold personal data); an existing file is refused, unless appendTo, so that an
// archive is never overwritten.
func exportFile(path string, appendTo bool) (*os.File, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if appendTo {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, usageError{fmt.Sprintf("%s exists: an archive is never overwritten (choose another file, or -append to add to it)", path)}
	}
	return f, err
}

// closeExport syncs and closes an export file, and says so when that fails: the
// records may not all be on disk.
func closeExport(f *os.File) error {
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("export %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("export %s: %w", f.Name(), err)
	}
	return nil
}

// exportView is what dlq export writes with -json.
type exportView struct {
	Broker string `json:"broker"`
	File   string `json:"file,omitempty"`
	dlq.ExportResult
}

func dlqExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq export", stdout, stderr)
	fs := o.flags()
	var q queueFlags
	var sel selectFlag
	q.register(fs)
	registerSelect(fs, &sel)
	file := fs.String("o", "", "write the export to this file (created, mode 0600; default: stdout)")
	appendTo := fs.Bool("append", false, "add to the -o file when it exists (by default an existing file is refused)")
	maxN := fs.Int("max", 0, "export at most this many messages (0: no limit)")
	b, name, s, err := openSelected(ctx, o, fs, args, &q, &sel)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	if *maxN < 0 {
		return o.finish(usageError{"-max must not be negative"})
	}
	// The records go to stdout, or to the file; the summary goes where they do not.
	var dst io.Writer = stdout
	report := stderr
	var f *os.File
	if *file != "" && *file != "-" {
		if f, err = exportFile(*file, *appendTo); err != nil {
			return o.finish(err)
		}
		dst, report = f, stdout
	}
	bw := bufio.NewWriterSize(dst, 256<<10)
	w := dlq.NewWriter(bw)
	opts := []dlq.Option{dlq.WithMax(*maxN)}
	if s != nil {
		opts = append(opts, dlq.WithSelect(s))
	}
	pb := newBar(stderr, "export "+name)
	if f == nil && isTerminal(stdout) {
		pb.on = false // the records are on the same terminal
	}
	opts = append(opts, dlq.WithProgress(func(p dlq.Progress) { pb.update(p.Moved, -1, fmt.Sprintf("skipped %d", p.Kept)) }))
	res, err := dlq.Export(ctx, b.tr, name, w, opts...)
	pb.finish(res.Exported, -1, fmt.Sprintf("skipped %d", res.Skipped))
	if ferr := bw.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("export: %w", ferr)
	}
	if f != nil {
		if cerr := closeExport(f); cerr != nil && err == nil {
			err = cerr
		}
	}
	ro := &out{cmd: o.cmd, json: o.json, stdout: report, stderr: stderr}
	if o.json {
		if eerr := ro.emit(exportView{Broker: b.name(), File: *file, ExportResult: res}); eerr != nil {
			return eerr
		}
	} else {
		where := "stdout"
		if f != nil {
			where = *file
		}
		fmt.Fprintf(report, "exported %d message(s) of %s on %s to %s", res.Exported, name, b.name(), where)
		if res.Skipped > 0 {
			fmt.Fprintf(report, " (%d not selected)", res.Skipped)
		}
		fmt.Fprintln(report, "; they are still on the queue")
		printCounts(report, res.Selected)
	}
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if res.Stopped == dlq.StopInterrupted {
		return o.finish(interruptedError{fmt.Sprintf("exported %d message(s) before it stopped", res.Exported)})
	}
	return nil
}

// printCounts writes the counts by reason and by URN of what was selected.
func printCounts(w io.Writer, st dlq.Stats) {
	for _, sec := range []struct {
		title  string
		groups []dlq.Group
		none   string
	}{
		{"by reason", st.Reasons, "(no dead_letter block)"},
		{"by URN", st.URNs, "(not an envelope)"},
	} {
		if len(sec.groups) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s:", sec.title)
		for i, g := range sec.groups {
			key := g.Key
			if key == "" {
				key = sec.none
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %d %s", sep, g.Count, key)
		}
		fmt.Fprintln(w)
	}
}

// purgeView is what dlq purge writes with -json.
type purgeView struct {
	Broker string `json:"broker"`
	File   string `json:"export,omitempty"`
	dlq.PurgeResult
	// Items are the messages removed (on a dry run: that would be).
	Items []dlq.Item `json:"items"`
	// Note says what the broker did instead of deleting (Kafka).
	Note string `json:"note,omitempty"`
}

// maxListed is how many messages a purge lists in text.
const maxListed = 20

func dlqPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq purge", stdout, stderr)
	fs := o.flags()
	var q queueFlags
	var sel selectFlag
	q.register(fs)
	registerSelect(fs, &sel)
	all := fs.Bool("all", false, "purge every message of the queue (without -select, one of the two is required)")
	yes := fs.Bool("yes", false, "remove the messages; without it the purge is a dry run that changes nothing")
	export := fs.String("export", "", "archive each message to this file (JSON lines, as dlq export writes them; mode 0600) before removing it")
	appendTo := fs.Bool("append", false, "add to the -export file when it exists (by default an existing file is refused)")
	maxN := fs.Int("max", 0, "remove at most this many messages (0: no limit)")
	commitPast := fs.Bool("commit-past", false, "Kafka: records cannot be deleted; move the consumer group past the selected ones instead (see -h)")
	idle := fs.Duration("idle", 2*time.Second, "stop once the queue gave nothing for this long")
	b, name, s, err := openSelected(ctx, o, fs, args, &q, &sel)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	switch {
	case *maxN < 0:
		return o.finish(usageError{"-max must not be negative"})
	case len(sel) == 0 && !*all:
		return o.finish(usageError{"say what to purge: -select clauses, or -all for every message of " + name})
	case len(sel) > 0 && *all:
		return o.finish(usageError{"-all purges every message: give it without -select"})
	}
	opts := []dlq.Option{dlq.WithMax(*maxN), dlq.WithIdle(*idle)}
	if s != nil {
		opts = append(opts, dlq.WithSelect(s))
	}
	if !*yes {
		opts = append(opts, dlq.WithDryRun())
	}
	if *commitPast {
		opts = append(opts, dlq.WithCommitPast())
	}
	var f *os.File
	if *export != "" && *yes {
		if f, err = exportFile(*export, *appendTo); err != nil {
			return o.finish(err)
		}
		opts = append(opts, dlq.WithExport(dlq.NewWriter(f)))
	}
	label := "purge " + name
	if !*yes {
		label = "dry run " + name
	}
	pb := newBar(stderr, label)
	var items []dlq.Item
	var last dlq.Progress
	opts = append(opts, dlq.WithProgress(func(p dlq.Progress) {
		last = p
		if p.Last.Action != dlq.Kept {
			items = append(items, p.Last)
		}
		pb.update(p.Moved, p.Planned, fmt.Sprintf("kept %d", p.Kept))
	}))
	res, err := dlq.Purge(ctx, b.tr, name, opts...)
	pb.finish(res.Removed, last.Planned, fmt.Sprintf("kept %d", res.Kept))
	if f != nil {
		if cerr := closeExport(f); cerr != nil && err == nil {
			err = cerr
		}
	}
	note := ""
	if res.Group != "" {
		note = fmt.Sprintf("Kafka deletes no record: consumer group %q %s moved past the removed records, and the unselected records among them %s written to the end of the topic again; every record stays in the topic, for any other reader, until its retention ends",
			res.Group, map[bool]string{true: "would be", false: "was"}[res.DryRun], map[bool]string{true: "would be", false: "were"}[res.DryRun])
	}
	if o.json {
		if items == nil {
			items = []dlq.Item{}
		}
		file := ""
		if f != nil {
			file = *export
		}
		if eerr := o.emit(purgeView{Broker: b.name(), File: file, PurgeResult: res, Items: items, Note: note}); eerr != nil {
			return eerr
		}
	} else if !errors.Is(err, dlq.ErrCannotRemove) {
		printPurge(stdout, b, res, items, note, *export, f != nil)
	}
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if res.Stopped == dlq.StopInterrupted {
		what := fmt.Sprintf("removed %d message(s) before it stopped; nothing unselected was removed", res.Removed)
		if f != nil {
			what += "; every message removed is in " + *export
		}
		return o.finish(interruptedError{what})
	}
	return nil
}

func printPurge(w io.Writer, b *broker, res dlq.PurgeResult, items []dlq.Item, note, export string, exported bool) {
	if res.DryRun {
		fmt.Fprintf(w, "dry run: would remove %d message(s) of %s on %s\n", res.Removed, res.Queue, b.name())
	} else {
		fmt.Fprintf(w, "removed %d message(s) from %s on %s\n", res.Removed, res.Queue, b.name())
	}
	printCounts(w, res.Selected)
	if len(items) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  REASON\tURN\tID")
		for _, it := range items[:min(len(items), maxListed)] {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", orDash(it.Reason), orDash(it.URN), orDash(it.ID))
		}
		_ = tw.Flush()
		if len(items) > maxListed {
			fmt.Fprintf(w, "  … and %d more (-json lists them all)\n", len(items)-maxListed)
		}
	}
	switch {
	case res.DryRun:
		fmt.Fprintf(w, "%d message(s) not selected stay\n", res.Kept)
	case res.Kept > 0:
		fmt.Fprintf(w, "%d message(s) not selected were met on the way and written back to the end of %s, bytes, key and headers unchanged\n", res.Kept, res.Queue)
	}
	if exported {
		fmt.Fprintf(w, "archived to %s first: %d record(s)\n", export, res.Exported)
	}
	if note != "" {
		fmt.Fprintln(w, note)
	}
	switch res.Stopped {
	case dlq.StopInterrupted:
		fmt.Fprintf(w, "interrupted: the %d message(s) above were removed; every other message is still on %s\n", res.Removed, res.Queue)
	case dlq.StopMax:
		fmt.Fprintln(w, "stopped at -max")
	case dlq.StopError:
		fmt.Fprintf(w, "stopped by an error; the message in hand is still on %s\n", res.Queue)
	}
	if res.DryRun {
		fmt.Fprint(w, "nothing was changed: run again with -yes to remove them")
		if export == "" {
			fmt.Fprint(w, " (and -export FILE to keep a copy)")
		}
		fmt.Fprintln(w)
	}
}

// importView is what dlq import writes with -json.
type importView struct {
	Broker string `json:"broker"`
	File   string `json:"file"`
	dlq.ImportResult
}

func dlqImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("dlq import", stdout, stderr)
	fs := o.flags()
	to := fs.String("to", "", "write every record to this queue (default: the queue each was exported from; URL#queue says the same)")
	maxN := fs.Int("max", 0, "import at most this many records (0: all)")
	dry := fs.Bool("dry-run", false, "read and check the export, count where each record would go, write nothing")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o.finish(err)
	}
	if err := wantArgs(pos, 2, "an export file (- for stdin) and a broker URL"); err != nil {
		return o.finish(err)
	}
	if *maxN < 0 {
		return o.finish(usageError{"-max must not be negative"})
	}
	raw, frag, err := oneQueue(pos[1])
	if err != nil {
		return o.finish(err)
	}
	var in io.Reader = os.Stdin
	total := -1
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return o.finish(err)
		}
		defer f.Close()
		if total, err = countLines(f); err != nil {
			return o.finish(err)
		}
		in = f
	}
	b, err := o.open(ctx, raw)
	if err != nil {
		return o.finish(err)
	}
	defer b.close()
	if frag != "" {
		var qf queueFlags
		if err := qf.fromURL(fs, frag, b); err != nil {
			return o.finish(err)
		}
		if err := queueFromURL(fs, "to", to, qf.name(b)); err != nil {
			return o.finish(err)
		}
	}
	opts := []dlq.Option{dlq.WithMax(*maxN)}
	if *to != "" {
		opts = append(opts, dlq.WithTarget(*to))
	}
	if *dry {
		opts = append(opts, dlq.WithDryRun())
	}
	pb := newBar(stderr, "import "+pos[0])
	opts = append(opts, dlq.WithProgress(func(p dlq.Progress) { pb.update(p.Moved, total, "") }))
	res, err := dlq.Import(ctx, b.tr, dlq.NewReader(in), opts...)
	pb.finish(res.Imported, total, "")
	if o.json {
		if eerr := o.emit(importView{Broker: b.name(), File: pos[0], ImportResult: res}); eerr != nil {
			return eerr
		}
	} else {
		verb := "imported"
		if res.DryRun {
			verb = "dry run: would import"
		}
		fmt.Fprintf(stdout, "%s %d record(s) of %s to %s", verb, res.Imported, pos[0], b.name())
		var parts []string
		for q, n := range res.To {
			parts = append(parts, fmt.Sprintf("%d to %s", n, q))
		}
		if len(parts) > 0 {
			sort.Strings(parts)
			fmt.Fprintf(stdout, " (%s)", strings.Join(parts, ", "))
		}
		fmt.Fprintln(stdout)
		if !res.DryRun && res.Imported > 0 {
			fmt.Fprintln(stdout, "each write was confirmed by the broker; bodies, keys and headers as exported")
		}
	}
	if err != nil {
		return o.finish(b.wrap(err))
	}
	if res.Stopped == dlq.StopInterrupted {
		return o.finish(interruptedError{fmt.Sprintf("imported %d record(s) before it stopped; the records after them were not written (run again with the rest)", res.Imported)})
	}
	return nil
}

// countLines counts the lines of an export file and rewinds it, for the progress bar.
func countLines(f *os.File) (int, error) {
	n, last := 0, byte('\n')
	buf := make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += bytes.Count(buf[:k], []byte{'\n'})
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	_, err := f.Seek(0, io.SeekStart)
	return n, err
}
