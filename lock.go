package locksmith

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A Lock is a handle to one acquisition of a lock. Its methods are safe for
// concurrent use. A handle never affects a lock it does not hold: once the
// key expires or holds another token, every method that would touch it
// returns an error matching ErrNotHeld instead.
type Lock struct {
	store handleStore
	key   string // as the caller gave it
	token string
	fence int64      // 0 without fencing
	cfg   holdConfig // what the hold keeps of its call's config

	// ref is what the store needs to act on this lock: its keys, token
	// and channel.
	ref lockRef

	// obs is set, before the handle is returned, when the Locker that
	// obtained it has an observer; nil otherwise. (A pointer, so that a
	// Lock without one stays in its allocation size class.)
	obs *lockObserver

	releaseMu sync.Mutex // held for the whole of Release, so releases run one at a time

	mu       sync.Mutex    // guards the fields below
	ttl      time.Duration // the TTL of the last successful acquire or refresh
	deadline time.Time     // local end of validity: see Deadline
	since    time.Time     // when the hold began, for WithMaxHold: its first deadline less its validity
	released bool          // Release has deleted the key or found it gone
	hold     Hold          // what kind of hold it is, for events; never changes
	fencing  bool          // it takes fencing tokens (WithFencing); never changes
	lost     error         // why the lock was lost; nil while it is not
	lease    *leaseState   // nil until the first Lease call
}

type lockContextKey struct{}

// LockFromContext returns the lock whose lease ctx is (or derives from), as
// passed by WithLock to its function, or nil when ctx carries no lock.
func LockFromContext(ctx context.Context) *Lock {
	lk, _ := ctx.Value(lockContextKey{}).(*Lock)
	return lk
}

// Key returns the key as given to Obtain, without the prefix; for a set
// from ObtainAll, the first of its keys in sorted order (see Keys).
func (lk *Lock) Key() string { return lk.key }

// Token returns the random value that identifies this acquisition; the
// lock's Redis key holds it while this handle owns the lock.
func (lk *Lock) Token() string { return lk.token }

// Fence returns the lock's fencing token, or 0 when the lock was obtained
// without WithFencing. Fencing tokens of a key strictly increase from one
// acquisition to the next, so a resource that remembers the highest token
// it has seen, and rejects writes carrying a lower one, cannot be written
// by a holder whose lock has passed to someone else (because it was paused
// or cut off past its Deadline, say). Pass the token along with each write
// to the resource; see WithFencing for what it relies on.
//
// For a set from ObtainAll, Fence returns the highest of its keys' tokens,
// each from that key's own counter: compare a resource only with the
// token of its own key, FenceOf.
func (lk *Lock) Fence() int64 { return lk.fence }

// Deadline returns the local, conservative end of the lock's validity: the
// time taken just before the acquire (or the last successful refresh) was
// sent, plus the TTL, minus the drift allowance. Until then no other client
// can hold the lock, as long as the holder's and the server's clocks drift
// apart by less than the allowance and the server does not lose the key (a
// restart without persistence, a failover). Past it the holder must assume
// it has lost the lock.
//
// With WithMaxHold, Deadline is never later than the cap.
func (lk *Lock) Deadline() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.cfg.maxHold > 0 {
		if capAt := lk.since.Add(lk.cfg.maxHold); capAt.Before(lk.deadline) {
			return capAt
		}
	}
	return lk.deadline
}

// TTL returns the lock's remaining time to live, as the server counts it.
// It returns an error matching ErrNotHeld when the lock has expired, was
// released, or is held by someone else; other errors mean Redis could not
// answer. A negative result means the key has no expiry, which only happens
// when something outside this package removed it.
func (lk *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if lk.isReleased() {
		return 0, lk.notHeld()
	}
	ttl, held, err := lk.store.pttl(ctx, lk.ref)
	if err != nil {
		return 0, fmt.Errorf("locksmith: TTL of %q: %w", lk.name(), err)
	}
	if !held {
		return 0, lk.notHeld()
	}
	return ttl, nil
}

// Refresh resets the lock's time to live to ttl, if the lock is still held
// by this handle, and moves the Deadline accordingly; later lease renewals
// use the new TTL. ttl must be at least 1ms, and no longer than the
// Locker's maximum TTL (see WithMaxTTL), or Refresh returns an error
// matching ErrInvalidArgument and sends nothing.
//
// It returns an error matching ErrNotHeld, and changes nothing, when the
// lock has expired, was released or lost, or is held by someone else. Other
// errors mean Redis could not answer; the lock then keeps its old TTL
// (unless the refresh landed), and the caller may try again before the
// Deadline.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	ttl, err := checkTTL(ttl)
	if err != nil {
		return err
	}
	if m := lk.cfg.maxTTL; m > 0 && ttl > m {
		return fmt.Errorf("%w: TTL %v is longer than the Locker's maximum TTL %v (see WithMaxTTL)", ErrInvalidArgument, ttl, m)
	}
	drift := lk.cfg.driftFor(ttl)
	if drift >= ttl {
		return fmt.Errorf("%w: drift allowance %v must be shorter than the TTL %v", ErrInvalidArgument, drift, ttl)
	}
	if every := lk.cfg.renewEvery; every >= ttl {
		return fmt.Errorf("%w: renew interval %v must be shorter than the TTL %v", ErrInvalidArgument, every, ttl)
	}
	return lk.refresh(ctx, ttl, drift)
}

// Release deletes the lock if this handle still holds it, after stopping
// and waiting for any lease renewal. Lease contexts are cancelled once the
// lock is released.
//
// It returns an error matching ErrNotHeld when the lock had already expired
// or been taken (nothing is deleted then) and on every call after a
// successful one. Other errors mean Redis could not answer: the lock may
// still exist until its TTL runs out, and the caller may call Release again.
func (lk *Lock) Release(ctx context.Context) error {
	return lk.finish(ctx, "release", releaseOp)
}

func releaseOp(ctx context.Context, lk *Lock) (bool, error) {
	return lk.store.release(ctx, lk.ref)
}

// finish ends the lock with op, which deletes the key if it still holds
// the token and reports whether it did, as Release describes: renewal is
// stopped first and resumed if op fails; verb names op in errors.
// It reports the release to the observer and the tracer of the Locker
// that obtained lk, if there are any.
func (lk *Lock) finish(ctx context.Context, verb string, op func(context.Context, *Lock) (bool, error)) error {
	if lk.obs == nil {
		return lk.finishOnce(ctx, verb, op)
	}
	ctx, s := lk.obs.l.span(ctx, Call{Op: OpRelease, Key: lk.key, SetSize: len(lk.setKeys()), Prefix: lk.cfg.prefix, Hold: lk.hold})
	err := lk.finishOnce(ctx, verb, op)
	lk.lockEvent(EventRelease, err)
	s.end(Outcome{Err: err})
	return err
}

func (lk *Lock) finishOnce(ctx context.Context, verb string, op func(context.Context, *Lock) (bool, error)) error {
	lk.releaseMu.Lock()
	defer lk.releaseMu.Unlock()
	if lk.isReleased() {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, lk.name())
	}
	lk.stopRenewal()
	ok, err := op(ctx, lk)
	if err != nil {
		lk.resumeRenewal()
		return fmt.Errorf("locksmith: %s %q: %w", verb, lk.name(), err)
	}
	lk.end()
	if !ok {
		return lk.notHeld()
	}
	return nil
}

func (lk *Lock) isReleased() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.released
}

// lostCause returns why the lock was lost, or nil.
func (lk *Lock) lostCause() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.lost
}
