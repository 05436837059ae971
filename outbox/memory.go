package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// MemoryStore is an in-process [Store] for tests and single-process demos. It has no
// transaction: Save ignores tx (which may be nil) and the rows exist at once, so it
// cannot give the atomicity a database store gives. Everything else behaves as in
// package pgstore: claims exclude each other, per-key order, attempts and backoff.
// Published rows are dropped. Its zero value is not usable; call [NewMemoryStore].
type MemoryStore struct {
	mu     sync.Mutex
	rows   []*memRow // by id
	nextID int64
	now    func() time.Time
}

type memRow struct {
	id       int64
	msg      *transport.Message
	attempts int
	due      time.Time
	lastErr  string
	claimed  bool
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{now: time.Now}
}

var (
	_ Store   = (*MemoryStore)(nil)
	_ Counter = (*MemoryStore)(nil)
)

// copyMessage copies m deeply, keeping a nil key nil and an empty key empty.
func copyMessage(m *transport.Message) *transport.Message {
	c := *m
	c.Body = bytes.Clone(m.Body)
	c.Key = bytes.Clone(m.Key) // Clone keeps nil nil and empty empty
	if m.Headers != nil {
		c.Headers = maps.Clone(m.Headers)
	}
	return &c
}

// Save stores copies of msgs as new rows. tx is ignored.
func (s *MemoryStore) Save(_ context.Context, _ *sql.Tx, msgs ...*transport.Message) error {
	for _, m := range msgs {
		if m == nil || m.Queue == "" {
			return errors.New("outbox: message has no queue")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.nextID++
		s.rows = append(s.rows, &memRow{id: s.nextID, msg: copyMessage(m)})
	}
	return nil
}

// Claim takes up to limit due rows that no other claim holds, oldest first, skipping a
// keyed row while an earlier unpublished row of its key is outside the claim.
func (s *MemoryStore) Claim(_ context.Context, limit int) (Claim, error) {
	if limit <= 0 {
		return nil, errors.New("outbox: claim limit must be positive")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	c := &memClaim{s: s}
	blocked := map[string]bool{} // keys with an earlier row left out of this claim
	for _, r := range s.rows {
		if len(c.rows) == limit {
			break
		}
		key, keyed := string(r.msg.Key), r.msg.Key != nil
		if keyed && blocked[key] {
			continue
		}
		if r.claimed || r.due.After(now) {
			if keyed {
				blocked[key] = true
			}
			continue
		}
		r.claimed = true
		c.rows = append(c.rows, r)
	}
	return c, nil
}

// Pending returns how many rows are not published yet.
func (s *MemoryStore) Pending(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.rows)), nil
}

// Attempts returns the failed attempts and the last error of the row id, and whether
// the row is still unpublished.
func (s *MemoryStore) Attempts(id int64) (attempts int, lastErr string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.id == id {
			return r.attempts, r.lastErr, true
		}
	}
	return 0, "", false
}

type memClaim struct {
	s    *MemoryStore
	rows []*memRow
	done bool
}

func (c *memClaim) Records() []Record {
	recs := make([]Record, len(c.rows))
	for i, r := range c.rows {
		recs[i] = Record{ID: r.id, Message: copyMessage(r.msg), Attempts: r.attempts}
	}
	return recs
}

var errClaimEnded = errors.New("outbox: claim already ended")

func (c *memClaim) Commit(_ context.Context, res Result) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.done {
		return errClaimEnded
	}
	c.done = true
	now := c.s.now()
	mine := make(map[int64]*memRow, len(c.rows))
	for _, r := range c.rows {
		r.claimed = false
		mine[r.id] = r
	}
	for _, f := range res.Failed {
		if r := mine[f.ID]; r != nil {
			r.attempts++
			r.lastErr = f.Err
			r.due = now.Add(f.RetryIn)
		}
	}
	if len(res.Published) > 0 {
		published := make(map[int64]bool, len(res.Published))
		for _, id := range res.Published {
			if mine[id] != nil {
				published[id] = true
			}
		}
		c.s.rows = slices.DeleteFunc(c.s.rows, func(r *memRow) bool { return published[r.id] })
	}
	return nil
}

func (c *memClaim) Rollback(context.Context) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.done {
		return errClaimEnded
	}
	c.done = true
	for _, r := range c.rows {
		r.claimed = false
	}
	return nil
}
