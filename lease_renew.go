package locksmith

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A lease's own renewal loop, and the refresh it and the renewer apply
// (lease.go starts and stops it; renewer.go batches the plain locks').

// renew refreshes the lock every renewal interval until ctx is done (the
// Lease's context ends, or the lock ends: see endLeasesLocked). A failed
// refresh is retried sooner; the watchdog, not this loop, declares the
// lock lost when the failures last past the Deadline.
func (lk *Lock) renew(ctx context.Context, cancel context.CancelFunc, done chan struct{}, reschedule <-chan struct{}) {
	defer func() {
		lk.mu.Lock()
		if lk.lease.renewDone == done {
			lk.lease.renewCancel, lk.lease.renewDone = nil, nil
		}
		lk.mu.Unlock()
		cancel()
		close(done)
	}()
	timer := time.NewTimer(lk.untilRenewal())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reschedule:
			timer.Reset(lk.untilRenewal())
			continue
		case <-timer.C:
		}
		err := lk.renewOnce(ctx)
		next, more := lk.settleRenewal(err, ctx.Err() != nil)
		if !more {
			return
		}
		timer.Reset(next)
	}
}

// settleRenewal reports the result of a renewal, err (nil: renewed), to
// the observer, unless ended says the lease's context ended (a renewal
// cut short so is no failure), and applies it: a lock found gone is lost;
// another failure is kept for the cause the watchdog gives. It returns
// how long until the next renewal, sooner after a failure, and false
// when renewal stops.
func (lk *Lock) settleRenewal(err error, ended bool) (time.Duration, bool) {
	if lk.obs != nil && !ended {
		lk.lockEvent(EventRenewal, err)
	}
	switch {
	case err == nil:
		return lk.untilRenewal(), true
	case errors.Is(err, ErrNotHeld):
		lk.lose(fmt.Errorf("%w: renewal found %q expired or held by another owner", ErrLockLost, lk.name()))
		return 0, false
	case ended:
		return 0, false
	}
	lk.mu.Lock()
	lk.lease.lastErr = err
	lk.mu.Unlock()
	return max(lk.renewInterval()/4, time.Millisecond), true
}

// refresh resets the lock's TTL to ttl, with drift the allowance for it,
// as Refresh describes: for Refresh, and for each renewal.
func (lk *Lock) refresh(ctx context.Context, ttl, drift time.Duration) error {
	if err := lk.heldLocally(); err != nil {
		return err
	}
	start := time.Now()
	ok, err := lk.store.refresh(ctx, lk.ref, ttl)
	if err != nil {
		return fmt.Errorf("locksmith: refresh %q: %w", lk.name(), err)
	}
	return lk.applyRefresh(start, ttl, drift, ok)
}

// applyRefresh applies a refresh to ttl, with drift the allowance for
// it, sent at start, that found the lock holding the token (held) or not.
func (lk *Lock) applyRefresh(start time.Time, ttl, drift time.Duration, held bool) error {
	if !held {
		return lk.notHeld()
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.lost != nil {
		// The validity ran out while the refresh was in flight; the lease
		// has already told its users, so the handle stays lost.
		return fmt.Errorf("%w: %w", ErrNotHeld, lk.lost)
	}
	lk.deadline = start.Add(ttl - drift)
	if ttl != lk.ttl {
		lk.ttl = ttl
		lk.rescheduleLocked()
	}
	return nil
}

// heldLocally returns an error matching ErrNotHeld when the handle itself
// knows the lock is gone, or past its WithMaxHold, so that no command needs
// to be sent.
func (lk *Lock) heldLocally() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if !lk.released && lk.lost == nil && lk.cappedLocked() {
		lk.loseLocked(lk.capCause())
	}
	switch {
	case lk.released:
		return fmt.Errorf("%w: %q was released", ErrNotHeld, lk.name())
	case lk.lost != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, lk.lost)
	}
	return nil
}

// notHeld is the error of a call that found the lock gone in Redis.
func (lk *Lock) notHeld() error {
	return fmt.Errorf("%w: %q expired or is held by another owner", ErrNotHeld, lk.name())
}

// renewOnce refreshes the lock to its current TTL, giving up at the
// Deadline, after which a refresh cannot save it.
func (lk *Lock) renewOnce(ctx context.Context) error {
	lk.mu.Lock()
	ttl, deadline := lk.ttl, lk.deadline
	lk.mu.Unlock()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return lk.refresh(ctx, ttl, lk.cfg.driftFor(ttl))
}

// untilRenewal returns how long until the next renewal is due: when the
// lock's remaining validity has fallen to what a lock just obtained keeps
// after one renewal interval. For a lock just obtained or refreshed that
// is about one interval; a lock handed over after a wait (see handoff.go)
// can start with less validity, and renews sooner.
func (lk *Lock) untilRenewal() time.Duration {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.untilRenewalLocked(time.Now())
}

// untilRenewalLocked is untilRenewal from now. lk.mu must be held.
func (lk *Lock) untilRenewalLocked(now time.Time) time.Duration {
	every := lk.cfg.renewInterval(lk.ttl)
	validity := lk.ttl - lk.cfg.driftFor(lk.ttl)
	return max(min(every, lk.deadline.Sub(now)-(validity-every)), 0)
}

func (lk *Lock) renewInterval() time.Duration {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.cfg.renewInterval(lk.ttl)
}
