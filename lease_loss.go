package locksmith

import (
	"fmt"
	"time"
)

// How a lease ends: its watchdog, its cap (WithMaxHold), and the end of
// its contexts when the lock is lost or released.

// checkValidity runs when the watchdog fires: it declares the lock lost if
// the Deadline has passed, or waits for the Deadline a refresh has moved.
func (lk *Lock) checkValidity() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released || lk.lost != nil {
		return
	}
	if lk.cappedLocked() {
		lk.loseLocked(lk.capCause())
		return
	}
	if left := lk.untilWatchdogLocked(time.Now()); left > 0 {
		lk.lease.watchdog.Reset(left)
		return
	}
	cause := fmt.Errorf("%w: the validity of %q ran out before a renewal succeeded", ErrLockLost, lk.name())
	if lk.lease.lastErr != nil {
		cause = fmt.Errorf("%w (last renewal error: %w)", cause, lk.lease.lastErr)
	}
	lk.loseLocked(cause)
}

// untilWatchdogLocked returns how long from now until the watchdog must
// declare the lock lost: a little before the Deadline, so that the lease
// contexts are cancelled by the Deadline although a timer fires a little
// late (typically well under a millisecond), or at the cap of WithMaxHold
// if that comes first. lk.mu must be held.
func (lk *Lock) untilWatchdogLocked(now time.Time) time.Duration {
	lead := min(time.Millisecond, lk.ttl/100)
	left := lk.deadline.Sub(now) - lead
	if lk.cfg.maxHold > 0 {
		left = min(left, lk.since.Add(lk.cfg.maxHold).Sub(now))
	}
	return left
}

// cappedLocked reports whether the lock has been held for its
// WithMaxHold. lk.mu must be held.
func (lk *Lock) cappedLocked() bool {
	return lk.cfg.maxHold > 0 && !time.Now().Before(lk.since.Add(lk.cfg.maxHold))
}

// capCause is why a lock past its WithMaxHold counts as lost.
func (lk *Lock) capCause() error {
	return fmt.Errorf("%w: %q reached its cap of %v (WithMaxHold); the lease stopped renewing it", ErrMaxHold, lk.name(), lk.cfg.maxHold)
}

// lose marks the lock lost with cause, unless it has already ended.
func (lk *Lock) lose(cause error) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released || lk.lost != nil {
		return
	}
	lk.loseLocked(cause)
}

func (lk *Lock) loseLocked(cause error) {
	lk.lost = cause
	lk.endLeasesLocked(cause)
	if lk.obs != nil {
		lk.lockEvent(EventLeaseLost, cause)
	}
}

// endLeasesLocked cancels the lease contexts with cause (nil: released)
// and stops the renewal, without waiting for it. lk.mu must be held.
func (lk *Lock) endLeasesLocked(cause error) {
	ls := lk.lease
	if ls == nil {
		return
	}
	if ls.watchdog != nil {
		ls.watchdog.Stop()
	}
	for _, l := range ls.leases {
		l.cancel(cause)
	}
	ls.leases = nil
	lk.stopFirstRenewalLocked()
	lk.unbatchLocked()
	if ls.renewCancel != nil {
		ls.renewCancel()
	}
}

// unbatchLocked takes a lease renewed by its store's renewer out of the
// renewer's order; a renewal in flight still lands, and schedules no
// other. lk.mu must be held.
func (lk *Lock) unbatchLocked() {
	ls := lk.lease
	if !ls.batched {
		return
	}
	ls.batched = false
	lk.batchRenewer().remove(lk)
}

// end marks the lock released and cancels its lease contexts.
func (lk *Lock) end() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.released = true
	lk.endLeasesLocked(nil)
}
