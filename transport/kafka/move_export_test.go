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

// SetTxTimeout sets the transaction timeout of the transactional consumers opened from
// now on and returns the previous one.
func SetTxTimeout(d time.Duration) time.Duration {
	return time.Duration(txTimeout.Swap(int64(d)))
}
