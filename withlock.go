package locksmith

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Running a function under a lock: WithLock, and the lease and the
// release around the function that WithLock, WithLocks and Once share.

// lostReleaseWait bounds the release at the end of WithLock once the lock
// is lost or past its Deadline: its key is gone, or expires by itself
// within the drift allowance, so the release can at best free it a little
// early, and is not worth holding the caller up for.
const lostReleaseWait = time.Second

// WithLock obtains the lock on key (following the options, retry strategy
// included), runs fn with a lease context that renews the lock in the
// background, and releases the lock when fn returns or panics. A panic is
// passed on after the release.
//
// fn must stop its work when its context is done: the context is cancelled,
// with a cause matching ErrLockLost, as soon as the lock is found lost.
// Inside fn, LockFromContext returns the lock.
//
// WithLock returns the error from Obtain if the lock was not obtained, and
// otherwise fn's error. If the lock was lost while fn ran, or before the
// release succeeded, the result matches ErrLockLost even when fn returned
// nil. That includes the release finding the lock already gone, which is
// also what a release looks like when its reply was lost and the client
// resent it after the first one had deleted the key: a false alarm, on
// the safe side.
//
// The release runs on a context that ignores the cancellation of ctx but
// is bounded in time: it gets the TTL or 5s, whichever is shorter, and no
// more than 1s (or the TTL, if shorter) once the lock is lost or past its
// Deadline; a lost lock's key is gone or expires by itself within the
// drift allowance, so waiting longer could free it only a little early.
// So when fn returns promptly on its context's cancellation, WithLock
// returns at most about 1s after the lock is lost, even when Redis has
// stopped answering. The bound needs a client that honours contexts
// (go-redis Options.ContextTimeoutEnabled); otherwise a release to an
// unresponsive Redis, and a renewal in flight that the release waits
// for, take the client's read timeout (3s by default). If the release
// fails, its error is joined to the result, except, after a loss, an
// error matching ErrNotHeld, which only repeats what the loss says.
func (l *Locker) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if l.tracing() {
		return l.traced(ctx, Call{Op: OpWithLock, Key: key, Prefix: l.prefixOf(opts), Hold: HoldLock},
			func(ctx context.Context) (bool, error) { return l.withLockChecked(ctx, key, fn, opts) })
	}
	_, err := l.withLockChecked(ctx, key, fn, opts)
	return err
}

// withLockChecked is WithLock, once traced.
func (l *Locker) withLockChecked(ctx context.Context, key string, fn func(ctx context.Context) error, opts []Option) (failed bool, err error) {
	if fn == nil {
		err := fmt.Errorf("%w: nil function", ErrInvalidArgument)
		l.refused(ctx, key, opts, HoldLock, err)
		return false, err
	}
	cfg, err := l.callConfig(key, opts)
	if err != nil {
		l.refused(ctx, key, opts, HoldLock, err)
		return false, err
	}
	return l.withLock(ctx, key, &cfg, fn, nil)
}

// withLock is WithLock once its arguments are checked; Once shares it.
// When fn returns nil (not when it panics) and the lock was not found lost
// while it ran, finish, if not nil, ends the lock instead of Release. It
// must do what Release does, and report a lock that was gone with an error
// matching ErrNotHeld.
func (l *Locker) withLock(ctx context.Context, key string, cfg *config, fn func(ctx context.Context) error,
	finish func(ctx context.Context, lk *Lock) error) (failed bool, err error) {
	lk, err := l.acquire(ctx, key, cfg, lockKind{})
	if err != nil {
		return false, err
	}
	return runHeld(ctx, lk, fn, finish)
}

// runHeld runs fn under lk's lease, then releases lk (or, when fn
// succeeded and finish is given, finishes it with finish), as WithLock
// does. failed reports whether fn itself returned an error, for the
// outcome of a traced call (see callClass).
func runHeld(ctx context.Context, lk *Lock, fn func(ctx context.Context) error, finish func(ctx context.Context, lk *Lock) error) (failed bool, err error) {
	// The lease ends with this call even if the release fails (the lock
	// then expires with its TTL): nothing renews a lock nobody uses.
	leaseCtx, endLease := lk.leaseWithCancel(ctx)
	returned := false
	defer func() {
		// This also runs while a panic from fn unwinds; the panic then
		// continues with its original stack.
		defer endLease(nil)
		lost := lk.lostCause()
		// context.WithDeadline(context.WithoutCancel(ctx), …), with a
		// timer that the next release reuses (see bounds).
		rb := releaseBounds.Get().(*bounds)
		now := time.Now()
		rctx := rb.start(context.WithoutCancel(ctx), now, releaseDeadline(lk, lost != nil, now))
		var relErr error
		if finish != nil && returned && err == nil && lost == nil {
			relErr = finish(rctx, lk)
		} else {
			relErr = lk.Release(rctx)
		}
		rb.stop()
		releaseBounds.Put(rb)
		if relErr != nil {
			// The failed release resumed the renewal: end it.
			lk.stopRenewal()
		}
		if lost == nil {
			// The Deadline may have passed while the release hung.
			lost = lk.lostCause()
		}
		switch {
		case lost != nil:
			if !errors.Is(err, ErrLockLost) {
				err = errors.Join(err, lost)
			}
			if relErr != nil && !errors.Is(relErr, ErrNotHeld) {
				err = errors.Join(err, relErr)
			}
		case errors.Is(relErr, ErrNotHeld):
			// Neither the lease nor fn noticed, but the lock was gone
			// before the release: it expired or was taken while fn ran.
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrLockLost, relErr))
		case relErr != nil:
			err = errors.Join(err, relErr)
		}
	}()
	err = fn(leaseCtx)
	returned = true
	return err != nil, err
}

// releaseDeadline returns when the release at the end of WithLock, at
// now, gives up, as WithLock describes; lost is whether the lock is known
// lost.
func releaseDeadline(lk *Lock, lost bool, now time.Time) time.Time {
	end := lk.Deadline()
	if lost || end.Before(now) {
		end = now
	}
	end = end.Add(min(lk.cfg.ttl, lostReleaseWait))
	if limit := now.Add(min(lk.cfg.ttl, maxCleanupWait)); limit.Before(end) {
		return limit
	}
	return end
}
