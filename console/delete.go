package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
)

// Deleting and exporting dead letters: POST /api/delete removes a selection (a dry run
// first, then a job the page follows, as a redrive), POST /api/export downloads one as
// JSON lines (dlq.Export's format). Both are refused in read-only mode and logged with
// who asked.

// deleteRequest is the body of POST /api/delete.
type deleteRequest struct {
	Broker int      `json:"b"`
	Queue  string   `json:"q"`
	Refs   []string `json:"refs"`
	// All selects every message the filter selects (the whole queue without one).
	All    bool              `json:"all"`
	Filter map[string]string `json:"filter"`
	DryRun bool              `json:"dry_run"`
	// Confirm must be true for a deletion that removes messages.
	Confirm bool `json:"confirm"`
	// Max bounds the messages removed: the count the dry run showed and the
	// confirmation named, so that messages that arrived since are not removed
	// unseen. Zero is no bound.
	Max int `json:"max"`
	// CommitPast allows the deletion on a broker whose queues are a consumer group's
	// log (Kafka), where it moves the group past the messages (dlq.WithCommitPast).
	CommitPast bool `json:"commit_past"`
}

// deletePreview is the answer to a deletion's dry run.
type deletePreview struct {
	Result dlq.PurgeResult `json:"result"`
	Items  []dlq.Item      `json:"items"`
	// More counts the messages of the selection not listed in Items.
	More int `json:"more"`
	// Selected is how many messages were asked for (-1: a filter).
	Selected int `json:"selected"`
	// Missing counts the messages asked for by hand that the dry run did not see.
	Missing int `json:"missing"`
	// Note says what the broker does instead of deleting (Kafka).
	Note string `json:"note,omitempty"`
}

// selection reads which messages a request means: refs picked by hand, or every
// message of a filter. selected is how many were picked (-1 for a filter).
func selection(refList []string, all bool, filterParams map[string]string) (dlq.Select, int, error) {
	switch {
	case len(refList) > 0 && all:
		return nil, 0, &requestError{status: http.StatusBadRequest, msg: "choose messages or all of a filter, not both"}
	case len(refList) > maxRefs:
		return nil, 0, &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("at most %d messages by hand; choose a filter instead", maxRefs)}
	case len(refList) > 0:
		refs := map[string]bool{}
		for _, id := range refList {
			refs[id] = true
		}
		return func(e *dlq.Entry) bool { return refs[ref(e.Delivery)] }, len(refs), nil
	case all:
		f, err := filterOf(filterParams)
		if err != nil {
			return nil, 0, err
		}
		return f.matchEntry, -1, nil
	default:
		return nil, 0, &requestError{status: http.StatusBadRequest, msg: "no message selected"}
	}
}

// deadLetterQueue checks that a request names a broker and one of its dead-letter
// queues.
func (c *Console) deadLetterQueue(bi int, queue string) (*brokerState, error) {
	if bi < 0 || bi >= len(c.brokers) {
		return nil, &requestError{status: http.StatusNotFound, msg: "no such broker"}
	}
	b := c.brokers[bi]
	if role, ok := b.known[queue]; !ok || !role.dlq {
		return nil, &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("%q is not a dead-letter queue the console knows on %s", queue, b.name)}
	}
	return b, nil
}

// logNote says what a broker whose queues are a consumer group's log does instead of
// deleting.
func logNote(res dlq.PurgeResult) string {
	if res.Group == "" {
		return ""
	}
	return fmt.Sprintf("This broker deletes no record: consumer group %q is moved past them, and the messages not selected among them are written to the end of the queue again. Every record stays in the log, for any other reader, until its retention ends.", res.Group)
}

// deleteMessages serves POST /api/delete: a dry run answers at once; a confirmed
// deletion starts a job whose progress GET /api/jobs/{id} reports.
func (c *Console) deleteMessages(w http.ResponseWriter, r *http.Request, user string) error {
	var req deleteRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return &requestError{status: http.StatusBadRequest, msg: "bad delete request: " + err.Error()}
	}
	b, err := c.deadLetterQueue(req.Broker, req.Queue)
	if err != nil {
		return err
	}
	sel, selected, err := selection(req.Refs, req.All, req.Filter)
	if err != nil {
		return err
	}
	if req.Max < 0 {
		return &requestError{status: http.StatusBadRequest, msg: "max must not be negative"}
	}
	bound := req.Max
	if selected > 0 && (bound == 0 || bound > selected) {
		bound = selected
	}
	opts := []dlq.Option{dlq.WithSelect(sel), dlq.WithMax(bound), dlq.WithLogger(c.o.log)}
	if req.CommitPast {
		opts = append(opts, dlq.WithCommitPast())
	}
	log := c.o.log.With("user", user, "remote", r.RemoteAddr, "broker", b.name, "dlq", req.Queue, "selected", selected)

	if req.DryRun {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		p := deletePreview{Selected: selected, Items: []dlq.Item{}}
		opts = append(opts, dlq.WithDryRun(), dlq.WithProgress(func(pr dlq.Progress) {
			if pr.Last.Action == dlq.Kept {
				return
			}
			if len(p.Items) < maxPreview {
				p.Items = append(p.Items, pr.Last)
			} else {
				p.More++
			}
		}))
		res, err := dlq.Purge(ctx, b.tr, req.Queue, opts...)
		if err != nil {
			return fmt.Errorf("dry run: %w", err)
		}
		p.Result, p.Note = res, logNote(res)
		if selected > 0 {
			p.Missing = max(selected-res.Removed, 0)
		}
		log.Info("console: delete dry run", "would_remove", res.Removed)
		return writeJSON(w, http.StatusOK, p)
	}

	if !req.Confirm {
		return &requestError{status: http.StatusBadRequest, msg: "a deletion must be confirmed (confirm: true) after its dry run"}
	}
	jb := &job{ID: randomToken()[:16], Kind: "delete", User: user, Broker: b.name, Queue: req.Queue,
		Selected: selected, Started: time.Now(), Planned: -1}
	key := fmt.Sprintf("%d/%s", b.id, req.Queue)
	if err := c.jobs.start(key, jb); err != nil {
		return err
	}
	var removed []string
	opts = append(opts, dlq.WithProgress(func(pr dlq.Progress) {
		if pr.Last.Action == dlq.Removed && len(removed) < 20 {
			id := pr.Last.ID
			if id == "" {
				id = "(poison)"
			}
			removed = append(removed, id)
		}
		c.jobs.update(jb, func(j *job) { j.Moved, j.Kept, j.Planned = pr.Moved, pr.Kept, pr.Planned })
	}))
	log.Info("console: delete started", "job", jb.ID, "max", bound)
	started := c.background(func() {
		res, err := dlq.Purge(c.ctx, b.tr, req.Queue, opts...)
		args := []any{"job", jb.ID, "removed", res.Removed, "kept", res.Kept, "stopped", res.Stopped, "first_ids", removed}
		if res.Group != "" {
			args = append(args, "group", res.Group)
		}
		if err != nil {
			log.Warn("console: delete failed", append(args, "err", err)...)
		} else {
			log.Info("console: delete", args...)
		}
		// The page shows the queue as it is now before the job reads as done.
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
		defer cancel()
		if ix := c.existingIndex(b, req.Queue); ix != nil {
			_ = ix.waitFor(ctx, ix.refresh())
		}
		c.jobs.end(key, jb, func(j *job) {
			j.Moved, j.Kept, j.Purge = res.Removed, res.Kept, &res
			if err != nil {
				j.Error = err.Error()
			}
		})
	})
	if !started {
		c.jobs.end(key, jb, func(j *job) { j.Error = "the console is closing" })
		return &requestError{status: http.StatusServiceUnavailable, msg: "the console is closing"}
	}
	return writeJSON(w, http.StatusAccepted, map[string]string{"job": jb.ID})
}

// end marks a job done after f updated it, and frees its queue.
func (j *jobs) end(key string, jb *job, f func(*job)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	f(jb)
	jb.Ended, jb.Done = &now, true
	delete(j.busy, key)
}

// unsafeFileChars are the characters a download's file name does without.
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// exportMessages serves POST /api/export, a form the page submits: fields b, q, and
// refs (comma-separated) or all=1 with filter (the filter's parameters as JSON). The
// answer is the export as a download, one JSON line per message (dlq.Export); the
// messages stay on the queue.
func (c *Console) exportMessages(w http.ResponseWriter, r *http.Request, user string) error {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	if err := r.ParseForm(); err != nil {
		return &requestError{status: http.StatusBadRequest, msg: "bad export request: " + err.Error()}
	}
	var bi int
	if _, err := fmt.Sscanf(r.PostFormValue("b"), "%d", &bi); err != nil {
		return &requestError{status: http.StatusNotFound, msg: "no such broker"}
	}
	queue := r.PostFormValue("q")
	b, err := c.deadLetterQueue(bi, queue)
	if err != nil {
		return err
	}
	var refList []string
	if s := strings.TrimSpace(r.PostFormValue("refs")); s != "" {
		refList = strings.Split(s, ",")
	}
	var filterParams map[string]string
	if s := r.PostFormValue("filter"); s != "" {
		if err := json.Unmarshal([]byte(s), &filterParams); err != nil {
			return &requestError{status: http.StatusBadRequest, msg: "bad export filter: " + err.Error()}
		}
	}
	sel, selected, err := selection(refList, r.PostFormValue("all") == "1", filterParams)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%s.jsonl", unsafeFileChars.ReplaceAllString(queue, "_"), time.Now().UTC().Format("20060102T150405Z"))
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	res, err := dlq.Export(ctx, b.tr, queue, dlq.NewWriter(bw), dlq.WithSelect(sel))
	if ferr := bw.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	log := c.o.log.With("user", user, "remote", r.RemoteAddr, "broker", b.name, "dlq", queue, "selected", selected,
		"exported", res.Exported, "file", name)
	switch {
	case err != nil:
		// The status is sent: the download ends short, and the log says so.
		log.Warn("console: export failed; the download is incomplete", "err", err)
	case res.Stopped == dlq.StopInterrupted:
		log.Warn("console: export interrupted; the download is incomplete")
	default:
		log.Info("console: export")
	}
	return nil
}

// errReadOnly answers an action in read-only mode.
var errReadOnly = &requestError{status: http.StatusForbidden, msg: "this console is read-only"}

// action adapts the handler of an action: refused in read-only mode, told who asks.
func (c *Console) action(f func(http.ResponseWriter, *http.Request, string) error) http.HandlerFunc {
	return c.api(func(w http.ResponseWriter, r *http.Request) error {
		if c.o.readOnly {
			return errReadOnly
		}
		return f(w, r, requestOf(r).user)
	})
}
