package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
)

// redriveRequest is the body of POST /api/redrive.
type redriveRequest struct {
	Broker int      `json:"b"`
	Queue  string   `json:"q"`
	Refs   []string `json:"refs"`
	// All selects every message the filter selects (the whole queue without one).
	All    bool              `json:"all"`
	Filter map[string]string `json:"filter"`
	DryRun bool              `json:"dry_run"`
	Bypass bool              `json:"bypass"`
	Poison bool              `json:"poison"`
	Target string            `json:"target"`
	// Confirm must be true for a redrive that moves messages.
	Confirm bool `json:"confirm"`
}

// maxRefs bounds a selection by hand.
const maxRefs = 10_000

// maxPreview bounds the messages a dry run lists.
const maxPreview = 200

// job is a redrive or a deletion under way or done.
type job struct {
	ID       string      `json:"id"`
	Kind     string      `json:"kind"` // redrive, delete
	User     string      `json:"user"`
	Broker   string      `json:"broker"`
	Queue    string      `json:"queue"`
	Target   string      `json:"target,omitempty"`
	Bypass   bool        `json:"bypass"`
	Selected int         `json:"selected"` // -1: every message of a filter
	Started  time.Time   `json:"started"`
	Ended    *time.Time  `json:"ended,omitempty"`
	Done     bool        `json:"done"`
	Moved    int         `json:"moved"`
	Kept     int         `json:"kept"`
	Planned  int         `json:"planned"`
	Result   *dlq.Result `json:"result,omitempty"`
	// Purge is the result of a deletion.
	Purge *dlq.PurgeResult `json:"purge,omitempty"`
	Error string           `json:"error,omitempty"`
}

type jobs struct {
	mu    sync.Mutex
	byID  map[string]*job
	order []string
	busy  map[string]string // broker/queue → job id
}

func newJobs() *jobs { return &jobs{byID: map[string]*job{}, busy: map[string]string{}} }

// maxJobs is how many finished jobs are remembered.
const maxJobs = 100

func (j *jobs) start(key string, jb *job) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if id, ok := j.busy[key]; ok {
		return &requestError{status: http.StatusConflict, msg: fmt.Sprintf("a redrive or deletion of this queue is under way (job %s): wait for it to end", id)}
	}
	j.busy[key] = jb.ID
	j.byID[jb.ID] = jb
	j.order = append(j.order, jb.ID)
	for len(j.order) > maxJobs {
		old := j.byID[j.order[0]]
		if old != nil && !old.Done {
			break
		}
		delete(j.byID, j.order[0])
		j.order = j.order[1:]
	}
	return nil
}

func (j *jobs) update(jb *job, f func(*job)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(jb)
}

func (j *jobs) finish(key string, jb *job, res dlq.Result, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	jb.Ended, jb.Done, jb.Result = &now, true, &res
	jb.Moved, jb.Kept = res.Moved, res.Kept
	if err != nil {
		jb.Error = err.Error()
	}
	delete(j.busy, key)
}

func (j *jobs) get(id string) (job, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	jb, ok := j.byID[id]
	if !ok {
		return job{}, false
	}
	return *jb, true
}

// preview is the answer to a dry run.
type preview struct {
	Result dlq.Result `json:"result"`
	Items  []dlq.Item `json:"items"`
	// More counts the messages of the selection not listed in Items.
	More int `json:"more"`
	// Selected is how many messages were asked for (-1: a filter).
	Selected int `json:"selected"`
	// Missing counts the messages asked for by hand that the dry run did not see
	// (moved or consumed since the page was read).
	Missing int `json:"missing"`
}

// redrive serves POST /api/redrive: a dry run answers at once; a real redrive
// starts a job whose progress GET /api/jobs/{id} reports.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, s *session, user string) error {
	var req redriveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return &requestError{status: http.StatusBadRequest, msg: "bad redrive request: " + err.Error()}
	}
	if req.Broker < 0 || req.Broker >= len(c.brokers) {
		return &requestError{status: http.StatusNotFound, msg: "no such broker"}
	}
	b := c.brokers[req.Broker]
	role, ok := b.known[req.Queue]
	if !ok || !role.dlq {
		return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("%q is not a dead-letter queue the console knows on %s", req.Queue, b.name)}
	}
	if req.Target != "" {
		if t, ok := b.known[req.Target]; !ok || t.dead == "" {
			return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("target %q is not a work queue the console knows on %s", req.Target, b.name)}
		}
	}
	opts := []dlq.Option{dlq.WithLogger(c.o.log)}
	selected := -1
	refs := map[string]bool{}
	switch {
	case len(req.Refs) > 0 && req.All:
		return &requestError{status: http.StatusBadRequest, msg: "choose messages or all of a filter, not both"}
	case len(req.Refs) > maxRefs:
		return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("at most %d messages by hand; redrive a filter instead", maxRefs)}
	case len(req.Refs) > 0:
		for _, id := range req.Refs {
			refs[id] = true
		}
		selected = len(refs)
		opts = append(opts, dlq.WithSelect(func(e *dlq.Entry) bool { return refs[ref(e.Delivery)] }), dlq.WithMax(selected))
	case req.All:
		f, err := filterOf(req.Filter)
		if err != nil {
			return err
		}
		opts = append(opts, dlq.WithSelect(f.matchEntry))
	default:
		return &requestError{status: http.StatusBadRequest, msg: "no message selected"}
	}
	if req.Target != "" {
		opts = append(opts, dlq.WithTarget(req.Target))
	}
	if req.Bypass {
		opts = append(opts, dlq.WithBypass())
	}
	if req.Poison {
		opts = append(opts, dlq.WithPoison())
	}
	log := c.o.log.With("user", user, "remote", r.RemoteAddr, "broker", b.name, "dlq", req.Queue,
		"selected", selected, "bypass", req.Bypass, "poison", req.Poison, "target", req.Target)

	if req.DryRun {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		p := preview{Selected: selected, Items: []dlq.Item{}}
		seen := 0
		opts = append(opts, dlq.WithDryRun(), dlq.WithProgress(func(pr dlq.Progress) {
			if pr.Last.Action == dlq.Kept && pr.Last.Why == "not selected" {
				return
			}
			seen++
			if len(p.Items) < maxPreview {
				p.Items = append(p.Items, pr.Last)
			} else {
				p.More++
			}
		}))
		res, err := dlq.Redrive(ctx, b.tr, req.Queue, opts...)
		if err != nil {
			return fmt.Errorf("dry run: %w", err)
		}
		p.Result = res
		if selected > 0 {
			p.Missing = max(selected-seen, 0)
		}
		log.Info("console: redrive dry run", "would_move", res.Moved, "kept_selected", seen-res.Moved)
		return writeJSON(w, http.StatusOK, p)
	}

	if !req.Confirm {
		return &requestError{status: http.StatusBadRequest, msg: "a redrive that moves messages must be confirmed (confirm: true) after its dry run"}
	}
	jb := &job{ID: randomToken()[:16], Kind: "redrive", User: user, Broker: b.name, Queue: req.Queue, Target: req.Target,
		Bypass: req.Bypass, Selected: selected, Started: time.Now(), Planned: -1}
	key := fmt.Sprintf("%d/%s", b.id, req.Queue)
	if err := c.jobs.start(key, jb); err != nil {
		return err
	}
	var moved []string
	opts = append(opts, dlq.WithProgress(func(pr dlq.Progress) {
		if pr.Last.Action == dlq.Moved && len(moved) < 20 {
			moved = append(moved, pr.Last.ID)
		}
		c.jobs.update(jb, func(j *job) { j.Moved, j.Kept, j.Planned = pr.Moved, pr.Kept, pr.Planned })
	}))
	log.Info("console: redrive started", "job", jb.ID)
	started := c.background(func() {
		res, err := dlq.Redrive(c.ctx, b.tr, req.Queue, opts...)
		to := make([]string, 0, len(res.To))
		for q := range res.To {
			to = append(to, q)
		}
		sort.Strings(to)
		args := []any{"job", jb.ID, "moved", res.Moved, "kept", res.Kept, "to", to, "stopped", res.Stopped, "first_ids", moved}
		if err != nil {
			log.Warn("console: redrive failed", append(args, "err", err)...)
		} else {
			log.Info("console: redrive", args...)
		}
		// The pages show the queues as they are now before the job reads as done.
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
		defer cancel()
		var waits []func() error
		for _, q := range append([]string{req.Queue}, to...) {
			if ix := c.existingIndex(b, q); ix != nil {
				seq := ix.refresh()
				waits = append(waits, func() error { return ix.waitFor(ctx, seq) })
			}
		}
		for _, wait := range waits {
			_ = wait()
		}
		c.jobs.finish(key, jb, res, err)
	})
	if !started {
		c.jobs.finish(key, jb, dlq.Result{Queue: req.Queue, Stopped: dlq.StopInterrupted}, errors.New("the console is closing"))
		return &requestError{status: http.StatusServiceUnavailable, msg: "the console is closing"}
	}
	return writeJSON(w, http.StatusAccepted, map[string]string{"job": jb.ID})
}

// existingIndex returns the index of a queue when the console keeps one.
func (c *Console) existingIndex(b *brokerState, queue string) *index {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.indexes[queue]
}

// filterOf reads a filter from its parameters (reason, urn, lang, queue, fp).
func filterOf(m map[string]string) (filter, error) {
	var f filter
	for k, v := range m {
		found := false
		for d, p := range dimParams {
			if k == p {
				f.set[d], f.vals[d], found = true, v, true
			}
		}
		if !found {
			return f, &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf("unknown filter %q (want reason, urn, lang, queue or fp)", k)}
		}
	}
	return f, nil
}
