package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Defaults of a [Relay], those of the family's relay where it has one.
const (
	DefaultBatchSize     = 100
	DefaultPollInterval  = 250 * time.Millisecond
	DefaultBatchTimeout  = 30 * time.Second
	DefaultStoreTimeout  = 10 * time.Second
	DefaultPurgeInterval = time.Minute
)

// DefaultBackoff is the family's backoff: 50 ms per failed attempt, at most 5 s.
func DefaultBackoff(attempts int) time.Duration {
	return min(time.Duration(max(attempts, 1))*50*time.Millisecond, 5*time.Second)
}

// RelayOption configures a [Relay].
type RelayOption func(*Relay)

// WithBatchSize sets how many rows one claim takes (default [DefaultBatchSize]).
func WithBatchSize(n int) RelayOption {
	return func(r *Relay) {
		if n > 0 {
			r.batch = n
		}
	}
}

// WithPollInterval sets how long [Relay.Run] waits after a batch that found nothing to
// publish (default [DefaultPollInterval]). After a full batch it claims again at once.
func WithPollInterval(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.poll = d
		}
	}
}

// WithBackoff sets how long a row whose publish was not confirmed waits before it is due
// again, given its failed attempts so far including this one; [Relay.Run] also waits
// backoff(n) after the n-th store error in a row. Default [DefaultBackoff].
func WithBackoff(f func(attempts int) time.Duration) RelayOption {
	return func(r *Relay) {
		if f != nil {
			r.backoff = f
		}
	}
}

// WithBatchTimeout bounds the publish of one batch (default [DefaultBatchTimeout]);
// the rows of a publish that runs out of time are failed and retried.
func WithBatchTimeout(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.timeout = d
		}
	}
}

// WithStoreTimeout bounds each call on the store: a claim, its commit or rollback, a
// purge (default [DefaultStoreTimeout]). A database connection that went silent is
// given up after that long, logged, and retried on a new one, so neither the relay
// nor its shutdown waits on it longer. The store timeout is also the longest a claim
// can make [Relay.Run] wait after its context ends, besides the publish in flight.
func WithStoreTimeout(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.storeTimeout = d
		}
	}
}

// WithPurgeInterval sets how often [Relay.Run] asks a store that keeps published rows
// (a [Purger]) to delete those past their retention (default [DefaultPurgeInterval]).
func WithPurgeInterval(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.purgeEvery = d
		}
	}
}

// WithLogger sets the relay's logger (default slog.Default()).
func WithLogger(l *slog.Logger) RelayOption {
	return func(r *Relay) {
		if l != nil {
			r.log = l
		}
	}
}

// Stats are a relay's counters since it was made.
type Stats struct {
	// Published counts the rows the broker confirmed and the store marked published.
	Published int64
	// Failed counts row publishes the broker did not confirm (each retried later).
	Failed int64
	// Unmarked counts rows the broker confirmed but whose claim did not commit (the
	// database went away): they will be published again.
	Unmarked int64
	// Batches counts the claims that held at least one row.
	Batches int64
	// LastError is the last error of a batch (store or broker), with its time.
	LastError   string
	LastErrorAt time.Time
}

// Relay publishes the rows of a [Store] through a transport. Its methods are safe for
// concurrent use; several relays (in one process or many) may share one store.
type Relay struct {
	store        Store
	tr           transport.Transport
	batch        int
	poll         time.Duration
	timeout      time.Duration
	storeTimeout time.Duration
	purgeEvery   time.Duration
	backoff      func(int) time.Duration
	log          *slog.Logger

	mu      sync.Mutex
	stats   Stats
	noTable bool // the last claim failed for a missing table, and was logged
}

// NewRelay returns a relay that publishes the rows of store through tr. The transport
// must confirm its publishes: it implements [transport.ConfirmedPublisher] or reports
// [transport.Capabilities.PublishConfirmed].
func NewRelay(store Store, tr transport.Transport, opts ...RelayOption) *Relay {
	r := &Relay{
		store:        store,
		tr:           tr,
		batch:        DefaultBatchSize,
		poll:         DefaultPollInterval,
		timeout:      DefaultBatchTimeout,
		storeTimeout: DefaultStoreTimeout,
		purgeEvery:   DefaultPurgeInterval,
		backoff:      DefaultBackoff,
		log:          slog.Default(),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// ErrNotConfirming is returned by [Relay.Run] and [Relay.RelayOnce] for a transport that
// cannot confirm its publishes.
var ErrNotConfirming = errors.New("outbox: the transport cannot confirm publishes")

func (r *Relay) check() error {
	if r.store == nil || r.tr == nil {
		return errors.New("outbox: relay needs a store and a transport")
	}
	if _, ok := r.tr.(transport.ConfirmedPublisher); !ok && !r.tr.Capabilities().PublishConfirmed {
		return fmt.Errorf("%w (%T)", ErrNotConfirming, r.tr)
	}
	return nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Pending returns how many rows the store holds unpublished, when the store can count
// them (a [Counter]); ok is false otherwise.
func (r *Relay) Pending(ctx context.Context) (n int64, ok bool, err error) {
	c, ok := r.store.(Counter)
	if !ok {
		return 0, false, nil
	}
	n, err = c.Pending(ctx)
	return n, true, err
}

// BatchResult is what one batch did.
type BatchResult struct {
	// Claimed, Published and Failed count the batch's rows.
	Claimed, Published, Failed int
}

// RelayOnce claims one batch, publishes it with confirmation and commits the outcome.
// A publish that was not confirmed is not an error (its rows are failed and retried,
// and counted in Failed); a store error is. The batch is not cut short when ctx ends
// during the publish: it runs to its end within the batch timeout.
func (r *Relay) RelayOnce(ctx context.Context) (BatchResult, error) {
	if err := r.check(); err != nil {
		return BatchResult{}, err
	}
	return r.relayOnce(context.WithoutCancel(ctx))
}

func (r *Relay) relayOnce(ctx context.Context) (BatchResult, error) {
	cctx, cancel := context.WithTimeout(ctx, r.storeTimeout)
	claim, err := r.store.Claim(cctx, r.batch)
	cancel()
	if err != nil {
		err = fmt.Errorf("outbox: claim: %w", err)
		r.noteError(err)
		return BatchResult{}, err
	}
	recs := claim.Records()
	if len(recs) == 0 {
		cctx, cancel := context.WithTimeout(ctx, r.storeTimeout)
		defer cancel()
		if err := claim.Rollback(cctx); err != nil {
			err = fmt.Errorf("outbox: end an empty claim: %w", err)
			r.noteError(err)
			return BatchResult{}, err
		}
		return BatchResult{}, nil
	}

	msgs := make([]*transport.Message, len(recs))
	for i, rec := range recs {
		msgs[i] = rec.Message
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, r.timeout)
	perr := transport.PublishConfirmed(pctx, r.tr, msgs)
	cancel()
	res := r.outcome(recs, perr)

	cctx, cancel = context.WithTimeout(ctx, r.storeTimeout)
	defer cancel()
	out := BatchResult{Claimed: len(recs), Published: len(res.Published), Failed: len(res.Failed)}
	if err := claim.Commit(cctx, res); err != nil {
		err = fmt.Errorf("outbox: commit a claim of %d rows (%d confirmed by the broker will be published again): %w", len(recs), len(res.Published), err)
		r.mu.Lock()
		r.stats.Unmarked += int64(len(res.Published))
		r.mu.Unlock()
		r.noteError(err)
		return BatchResult{Claimed: len(recs)}, err
	}
	r.mu.Lock()
	r.stats.Batches++
	r.stats.Published += int64(out.Published)
	r.stats.Failed += int64(out.Failed)
	r.mu.Unlock()
	if perr != nil {
		r.noteError(perr)
		r.log.Warn("outbox: publish not confirmed; rows retried after a backoff",
			"rows", out.Failed, "confirmed", out.Published, "error", perr)
	} else {
		r.log.Debug("outbox: batch published", "rows", out.Published, "took", time.Since(start))
	}
	return out, nil
}

// outcome splits recs by the result of their publish.
func (r *Relay) outcome(recs []Record, perr error) Result {
	var res Result
	var be *transport.BatchError
	batchErr := errors.As(perr, &be) && len(be.Errs) == len(recs)
	for i, rec := range recs {
		err := perr
		if batchErr {
			err = be.Errs[i]
		}
		if err == nil {
			res.Published = append(res.Published, rec.ID)
			continue
		}
		res.Failed = append(res.Failed, Failure{ID: rec.ID, Err: oneLine(err), RetryIn: r.backoff(rec.Attempts + 1)})
	}
	return res
}

// oneLine cuts an error's text to a bounded single line for the store.
func oneLine(err error) string {
	const most = 1000
	s := []rune(err.Error())
	for i, c := range s {
		if c == '\n' || c == '\r' {
			s[i] = ' '
		}
	}
	if len(s) > most {
		s = append(s[:most], '…')
	}
	return string(s)
}

func (r *Relay) noteError(err error) {
	r.mu.Lock()
	r.stats.LastError = err.Error()
	r.stats.LastErrorAt = time.Now()
	r.mu.Unlock()
}

// tableFound notes a batch that worked, so a table dropped later is said again.
func (r *Relay) tableFound() {
	r.mu.Lock()
	r.noTable = false
	r.mu.Unlock()
}

// logBatchError logs a failed batch. A missing table is said once, with the command
// that makes it (every retry after that is logged at Debug), until a batch works.
func (r *Relay) logBatchError(err error, wait time.Duration) {
	if !errors.Is(err, ErrNoTable) {
		r.log.Error("outbox: relay batch failed; retrying", "error", err, "retry_in", wait)
		return
	}
	r.mu.Lock()
	said := r.noTable
	r.noTable = true
	r.mu.Unlock()
	if said {
		r.log.Debug("outbox: the outbox table still does not exist; retrying", "retry_in", wait)
		return
	}
	r.log.Error("outbox: the outbox table does not exist: run `babelqueue outbox migrate -db DSN` (or the relay with -migrate) to create it; the relay retries until it exists",
		"error", err, "retry_in", wait)
}

// Drain relays batches until one publishes nothing (the store is empty, or only rows
// that are not due or keep failing remain) or ctx ends, and returns the total.
func (r *Relay) Drain(ctx context.Context) (BatchResult, error) {
	if err := r.check(); err != nil {
		return BatchResult{}, err
	}
	var total BatchResult
	for ctx.Err() == nil {
		b, err := r.relayOnce(context.WithoutCancel(ctx))
		total.Claimed += b.Claimed
		total.Published += b.Published
		total.Failed += b.Failed
		if err != nil {
			return total, err
		}
		if b.Published == 0 {
			break
		}
	}
	return total, nil
}

// Run relays until ctx ends, then returns nil once the batch in flight is published and
// committed (within the store timeout, the batch timeout and the store timeout again). When a batch was full it claims again at once;
// otherwise it waits the poll interval. A store error (the database went away) is logged
// and retried after a backoff; a broker that went away shows as rows not confirmed,
// which wait their backoff and go out when it is back. Run returns an error only for a
// relay that cannot work at all (no store, a transport that does not confirm).
func (r *Relay) Run(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}
	r.log.Info("outbox: relay started", "batch", r.batch, "poll", r.poll)
	defer r.log.Info("outbox: relay stopped")
	purger, _ := r.store.(Purger)
	nextPurge := time.Now()
	storeErrs := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		b, err := r.relayOnce(context.WithoutCancel(ctx))
		wait := r.poll
		switch {
		case err != nil:
			storeErrs++
			wait = r.backoff(storeErrs)
			r.logBatchError(err, wait)
		case b.Claimed == r.batch && b.Published > 0:
			storeErrs = 0
			wait = 0
			r.tableFound()
		default:
			storeErrs = 0
			r.tableFound()
		}
		if purger != nil && time.Now().After(nextPurge) {
			nextPurge = time.Now().Add(r.purgeEvery)
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.storeTimeout)
			n, err := purger.Purge(pctx)
			cancel()
			if err != nil {
				r.log.Warn("outbox: purge of published rows failed", "error", err)
			} else if n > 0 {
				r.log.Debug("outbox: purged published rows", "rows", n)
			}
		}
		timer.Reset(wait)
	}
}
