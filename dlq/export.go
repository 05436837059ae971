package dlq

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/babelqueue-go/babelqueue/transport"
)

// ExportResult counts what [Export] did.
type ExportResult struct {
	// Queue is the queue exported.
	Queue string `json:"queue"`
	// Exported is the number of records written.
	Exported int `json:"exported"`
	// Skipped is the number of messages looked at that the selection does not select.
	Skipped int `json:"skipped"`
	// Selected counts the exported messages by reason, URN, language, original queue
	// and error.
	Selected Stats `json:"selected"`
	// Stopped says why the export ended: the end of the queue, the maximum, an
	// interruption (ctx ended; what was written stays written) or an error.
	Stopped Stop `json:"stopped"`
}

// Export writes the messages of queue that [WithSelect] selects (every message without
// it), at most [WithMax] of them, to w, one [Record] per message in queue order, and
// leaves them on the queue: it browses ([transport.Browser]) and consumes nothing.
// Each record holds the body byte for byte (poison bodies too), the key and the
// headers, so that [Import] can write it back unchanged to this broker or another.
// [WithProgress] is told of each message exported (Action [Exported]) or skipped.
// When ctx ends, Export returns what it wrote with [StopInterrupted] and a nil error.
func Export(ctx context.Context, tr transport.Transport, queue string, w *Writer, opts ...Option) (ExportResult, error) {
	o := newOptions(opts)
	res := ExportResult{Queue: queue, Stopped: StopEnd}
	if queue == "" {
		return res, errors.New("dlq: export: empty queue name")
	}
	var t Tally
	var werr error
	err := transport.BrowseAll(ctx, tr, queue, PageSize, func(d *transport.Delivery) bool {
		e := Read(d)
		a, why := Exported, ""
		if o.sel != nil && !o.sel(e) {
			a, why = Kept, "not selected"
			res.Skipped++
		} else {
			if werr = w.Write(e); werr != nil {
				return false
			}
			res.Exported++
			t.Add(e)
		}
		if o.progress != nil {
			o.progress(Progress{Last: Item{Action: a, ID: e.ID(), URN: e.URN(), TraceID: e.TraceID(), Reason: e.Reason(), From: queue, Why: why},
				Moved: res.Exported, Kept: res.Skipped, Planned: -1})
		}
		if o.max > 0 && res.Exported >= o.max {
			res.Stopped = StopMax
			return false
		}
		return true
	})
	res.Selected = t.Stats(queue)
	switch {
	case werr != nil:
		res.Stopped = StopError
		return res, werr
	case err != nil && ctx.Err() != nil:
		res.Stopped = StopInterrupted
		return res, nil
	case err != nil:
		res.Stopped = StopError
		return res, fmt.Errorf("dlq: export needs a browse of %q: %w", queue, err)
	}
	return res, nil
}

// ImportResult counts what [Import] did.
type ImportResult struct {
	// Imported is the number of records written and confirmed by the broker (on a
	// dry run: read and checked).
	Imported int `json:"imported"`
	// To counts them per queue written to.
	To map[string]int `json:"to"`
	// DryRun reports a dry run: the export was read and checked, nothing written.
	DryRun bool `json:"dry_run"`
	// Stopped says why the import ended.
	Stopped Stop `json:"stopped"`
}

// importBatch is how many records Import writes per confirmed batch.
const importBatch = 100

// Import writes the records of an export back: each to the queue it was exported from,
// or to [WithTarget]'s queue, with its body, key and headers exactly as exported and
// its attempts header as it was; at most [WithMax] of them; [WithDryRun] reads and
// checks the export and writes nothing. Every write is confirmed by the broker
// ([transport.PublishConfirmed]), a batch of 100 at a time, before the next batch is
// read, and [ImportResult.Imported] counts confirmed writes only. A bad line stops the
// import with an error matching [ErrBadExport] that names it, after the lines before
// it were written. An import is at least once: run again after a failure, it writes
// again what was confirmed before.
func Import(ctx context.Context, tr transport.Transport, r *Reader, opts ...Option) (ImportResult, error) {
	o := newOptions(opts)
	res := ImportResult{To: map[string]int{}, DryRun: o.dryRun, Stopped: StopEnd}
	var batch []*transport.Message
	// flush writes the batch; what the broker confirmed is counted.
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		confirmed := batch
		var err error
		if !o.dryRun {
			err = transport.PublishConfirmed(ctx, tr, batch)
			var be *transport.BatchError
			switch {
			case errors.As(err, &be):
				// Only the records before the first failure count: the ones after
				// it may have been written too, but not as a prefix of the export.
				confirmed = batch[:be.Failed()[0]]
			case err != nil:
				confirmed = nil
			}
		}
		for _, m := range confirmed {
			res.note(m, o)
		}
		batch = batch[:0]
		if err != nil {
			return fmt.Errorf("dlq: import: %d record(s) written and confirmed, then: %w", res.Imported, err)
		}
		return nil
	}
	stop := func(err error) (ImportResult, error) {
		if ferr := flush(); ferr != nil && err == nil {
			err = ferr
		}
		switch {
		case ctx.Err() != nil:
			res.Stopped = StopInterrupted
			return res, nil
		case err != nil:
			res.Stopped = StopError
		case o.max > 0 && res.Imported >= o.max:
			res.Stopped = StopMax
		}
		return res, err
	}
	for o.max == 0 || res.Imported+len(batch) < o.max {
		if ctx.Err() != nil {
			batch = batch[:0] // not written: an import run again writes them
			return stop(nil)
		}
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return stop(err)
		}
		m, err := rec.Message(o.to)
		if err != nil {
			return stop(&ExportError{Line: r.Line(), Err: err})
		}
		batch = append(batch, m)
		if len(batch) == importBatch {
			if err := flush(); err != nil {
				return stop(err)
			}
		}
	}
	return stop(nil)
}

func (res *ImportResult) note(m *transport.Message, o options) {
	res.Imported++
	res.To[m.Queue]++
	if o.progress != nil {
		o.progress(Progress{Last: Item{Action: Imported, ID: m.Projection.MessageID, URN: m.Projection.URN, TraceID: m.Projection.TraceID, To: m.Queue},
			Moved: res.Imported, Planned: -1})
	}
}
