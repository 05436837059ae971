package idempotency

import (
	"context"
	"crypto/rand"
	"sync"
	"time"
)

// MemoryStore is a [ClaimStore] in one process's memory: for tests and single-process
// consumers. It is not shared between processes and does not survive a restart; a
// fleet uses the Redis or PostgreSQL store. Its methods never fail and are safe for
// concurrent use.
type MemoryStore struct {
	ttl time.Duration

	mu        sync.Mutex
	ids       map[string]memoryEntry
	nextSweep int // sweep lapsed entries when the map grows to this size
}

// memoryEntry is a remembered id (token empty) or a claim; expires zero is never.
type memoryEntry struct {
	token   string
	expires time.Time
}

func (e memoryEntry) lapsed(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

const memorySweepFloor = 1024

// NewMemoryStore returns an empty store whose remembered ids lapse after ttl (zero:
// they are kept until Forget). Lapsed entries are dropped as the store grows, and by
// [MemoryStore.DeleteExpired].
func NewMemoryStore(ttl time.Duration) *MemoryStore {
	return &MemoryStore{ttl: max(ttl, 0), ids: map[string]memoryEntry{}, nextSweep: memorySweepFloor}
}

// Seen implements [Store].
func (s *MemoryStore) Seen(_ context.Context, id string) (bool, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.ids[id]
	return ok && e.token == "" && !e.lapsed(now), nil
}

// Remember implements [Store].
func (s *MemoryStore) Remember(_ context.Context, id string) error {
	e := memoryEntry{}
	now := time.Now()
	if s.ttl > 0 {
		e.expires = now.Add(s.ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(id, e, now)
	return nil
}

// Forget implements [Store].
func (s *MemoryStore) Forget(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
	return nil
}

// Claim implements [ClaimStore].
func (s *MemoryStore) Claim(_ context.Context, id string, lease time.Duration) (Claim, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.ids[id]; ok && !e.lapsed(now) {
		if e.token == "" {
			return Claim{Status: Remembered}, nil
		}
		return Claim{Status: Held, Remaining: e.expires.Sub(now)}, nil
	}
	token := rand.Text()
	s.putLocked(id, memoryEntry{token: token, expires: now.Add(lease)}, now)
	return Claim{Status: Claimed, Token: token}, nil
}

// Release implements [ClaimStore].
func (s *MemoryStore) Release(_ context.Context, id, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.ids[id]; ok && e.token != "" && e.token == token {
		delete(s.ids, id)
	}
	return nil
}

// DeleteExpired drops the lapsed remembered ids and claims and returns how many.
func (s *MemoryStore) DeleteExpired(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(time.Now()), nil
}

// Len returns how many ids the store holds, remembered or claimed, lapsed ones
// included until they are dropped.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *MemoryStore) putLocked(id string, e memoryEntry, now time.Time) {
	s.ids[id] = e
	if len(s.ids) >= s.nextSweep {
		s.sweepLocked(now)
		s.nextSweep = max(memorySweepFloor, 2*len(s.ids))
	}
}

func (s *MemoryStore) sweepLocked(now time.Time) int {
	n := 0
	for id, e := range s.ids {
		if e.lapsed(now) {
			delete(s.ids, id)
			n++
		}
	}
	return n
}

var _ ClaimStore = (*MemoryStore)(nil)
