package kafka

import (
	"sync"
	"time"
)

var txHooks = struct {
	sync.Mutex
	m map[string]func() error
}{m: map[string]func() error{}}

// SetTxBeforeCommit sets (nil: removes) the hook the transactional consumers of queue
// run between their transactional offset commit and the end of the transaction; an
// error from it aborts the transaction.
func SetTxBeforeCommit(queue string, fn func() error) {
	txHooks.Lock()
	defer txHooks.Unlock()
	if fn == nil {
		delete(txHooks.m, queue)
	} else {
		txHooks.m[queue] = fn
	}
	dispatch := func(q string) error {
		txHooks.Lock()
		fn := txHooks.m[q]
		txHooks.Unlock()
		if fn == nil {
			return nil
		}
		return fn()
	}
	txBeforeCommit.Store(&dispatch)
}

// WithTxTimeout sets the transaction timeout of the transport's transactional consumers
// (default 15 s).
func WithTxTimeout(d time.Duration) Option { return func(c *config) { c.txTimeout = d } }

// TxID is the transactional id of a consumer opened Transactional ("" for another).
func TxID(c any) string {
	k, ok := c.(kitConsumer)
	if !ok || k.c.tx == nil {
		return ""
	}
	k.c.tx.mu.Lock()
	defer k.c.tx.mu.Unlock()
	return k.c.tx.id
}
