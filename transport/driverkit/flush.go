package driverkit

import (
	"context"
	"log/slog"
	"time"
)

// RunCoalesced is a driver's background flush (offset commits, deferred acknowledgements):
// it calls flush each time sig fires, so the signals that come while a flush runs make
// one more flush, not one each. A flush that fails is tried again after retry's backoff,
// whether or not sig fires meanwhile; the failures are logged at the first and at each
// doubling of their count, with the cause, and the recovery once. After a flush that
// succeeds it pauses interval (cut short by urgent), so the signals of that time are
// flushed together. what names the flush in log lines ("kafka: offset commit"). It
// returns when ctx ends.
func RunCoalesced(ctx context.Context, sig, urgent <-chan struct{}, interval time.Duration, retry Backoff,
	log *slog.Logger, what string, flush func(context.Context) error) {
	failures := 0
	for {
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		for {
			err := flush(ctx)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				break
			}
			if failures++; failures&(failures-1) == 0 {
				log.Warn(what+" failed; retrying after a backoff", "failures", failures, "backoff", retry.Delay(failures), "err", err)
			}
			if retry.Wait(ctx, failures) != nil {
				return
			}
		}
		if failures > 0 {
			log.Info(what+" succeeds again", "failed_before", failures)
			failures = 0
		}
		if interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-urgent:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
}
