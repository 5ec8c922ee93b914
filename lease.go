package locksmith

import (
	"context"
	"sync"
	"time"
)

// leaseState is the part of a Lock that exists once Lease has been called.
// Its fields are guarded by the Lock's mu.
type leaseState struct {
	// leases are the contexts Lease returned that are not done yet; they
	// are cancelled when the lock ends: with a cause matching ErrLockLost
	// when it is lost, with context.Canceled when released.
	leases []leaseContext
	// one is the room of leases for its first context (WithLock leases a
	// lock once), so that it takes no allocation of its own.
	one [1]leaseContext
	// watchdog fires at the Deadline; if no refresh has moved the Deadline
	// by then, the lock is lost, whatever the network is doing. A lease in
	// its renewer's order, due before the watchdog would fire, has none
	// yet: the renewer takes it out of the order by then and arms it
	// (watchLocked), whether it sends the renewal or not, so that a lease
	// released before its first renewal, as most are, costs no timer of
	// its own. Once armed, it stays armed until the lease ends.
	watchdog *time.Timer

	// The running renewal, if any. parent is the context of the Lease
	// call that started it, kept to restart renewal after a failed
	// Release; the renewal stops when parent is done.
	parent      context.Context
	renewCancel context.CancelFunc // nil while no renewal runs
	renewDone   chan struct{}      // closed when the renewal goroutine has returned
	// firstRenewal, until the first renewal is due, stands for the
	// renewal goroutine, which it then starts (see startRenewalLocked);
	// nil once it has fired or been stopped. firstPending counts its
	// callback from when it is scheduled until it has run or the timer
	// was stopped before firing, so that stopRenewal can wait for it.
	firstRenewal *time.Timer
	firstPending sync.WaitGroup
	stopped      bool // Release is in progress: start no renewal

	// reschedule wakes the renewal goroutine when Refresh changes the
	// TTL, so that it renews on the new schedule. It has room for one
	// signal; made when the goroutine first starts (a lease renewed by
	// its store's renewer, or released before its first renewal, has
	// none).
	reschedule chan struct{}

	lastErr error // the last renewal failure, reported if the validity runs out

	// A lease renewed by its store's renewer (see renewer.go) instead of
	// a goroutine of its own: batched while it is in the renewer's order
	// or in a pipeline in flight (flight, closed when its result has
	// been applied). A renewal whose parent has ended is not sent, and
	// schedules no other. due, slack and at (its index in the order, -1
	// when not there) are guarded by the renewer's mu.
	batched bool
	flight  chan struct{}
	due     time.Time
	slack   time.Duration
	at      int
}

// leaseContext is a context Lease returned, with its cancel function.
type leaseContext struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Lease starts renewing the lock in the background and returns a context
// derived from ctx that carries the lock (see LockFromContext).
//
// The returned context is cancelled
//   - with a cause matching ErrLockLost as soon as a renewal finds the lock
//     gone or held by another owner, or when the Deadline passes without a
//     successful renewal (failed renewals are retried until then), whatever
//     the network does;
//   - when the lock is released;
//   - when ctx is done.
//
// The lock is renewed to its current TTL every third of the TTL, or as set
// by WithRenewInterval; the first renewal comes sooner when the lock has
// less validity left than a lock just obtained (a lease started late, or a
// lock handed over after a wait), so that it is due by the same margin
// before the Deadline. Renewal stops when ctx is done or the lock is
// released or lost; Release stops it and waits for a renewal in flight
// before deleting the lock. Lease may be called more than once: one
// renewal serves all the contexts it returns.
//
// The leases of a Locker's plain locks (New, without WithMaxTTL's restart
// guard) are renewed together: one goroutine of the Locker's keeps them in
// order, and sends the renewals that fall due within a tenth of the
// renewal interval (at most 50ms) of each other in one pipeline per
// master, so a renewal may come that much early, never late. Thousands of
// leases then cost no goroutine of their own (a timer's callback sends
// the pipelines) and one round trip per such window, not one each; the
// renewals go on after Close, as the leases do. Quorums, sets,
// semaphores, read-write locks and locks behind the restart guard renew
// each lease with a goroutine of its own, started at its first renewal.
func (lk *Lock) Lease(ctx context.Context) context.Context {
	lctx, _ := lk.leaseWithCancel(ctx)
	return lctx
}

// leaseWithCancel is Lease, and also returns the cancel function of the context it
// returns.
func (lk *Lock) leaseWithCancel(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockContextKey{}, lk))
	lk.mu.Lock()
	defer lk.mu.Unlock()
	switch {
	case lk.released:
		cancel(nil)
		return lctx, cancel
	case lk.lost != nil:
		cancel(lk.lost)
		return lctx, cancel
	}
	ls := lk.lease
	if ls == nil {
		ls = &leaseState{at: -1}
		ls.leases = ls.one[:0]
		lk.lease = ls
	}
	// Forget the contexts that are done, so that a lock leased again and
	// again keeps only those in use.
	live := ls.leases[:0]
	for _, l := range ls.leases {
		if l.ctx.Err() == nil {
			live = append(live, l)
		}
	}
	ls.leases = append(live, leaseContext{lctx, cancel})
	if !lk.renewingLocked() && !ls.stopped {
		lk.startRenewalLocked(ctx)
	}
	if !ls.batched {
		lk.watchLocked()
	}
	return lctx, cancel
}

// watchLocked arms the lease's watchdog unless it is armed already. lk.mu
// must be held.
func (lk *Lock) watchLocked() {
	if ls := lk.lease; ls.watchdog == nil {
		ls.watchdog = time.AfterFunc(lk.untilWatchdogLocked(time.Now()), lk.checkValidity)
	}
}

// scheduleLocked puts lk's lease in r's order (or moves it there), its
// renewal due wait after now; and arms its watchdog now unless the
// renewer will take it out of the order, and arm the watchdog, well
// before the watchdog must fire (see leaseState.watchdog). lk.mu must be
// held.
func (lk *Lock) scheduleLocked(r *renewer, now time.Time, wait time.Duration) {
	if wait+maxRenewSlack > lk.untilWatchdogLocked(now) {
		lk.watchLocked()
	}
	r.schedule(lk, now.Add(wait), renewSlack(lk.cfg.renewInterval(lk.ttl)))
}

// renewingLocked reports whether a renewal is scheduled or runs. lk.mu
// must be held.
func (lk *Lock) renewingLocked() bool {
	ls := lk.lease
	return ls.renewCancel != nil || ls.firstRenewal != nil || (ls.batched && ls.parent.Err() == nil)
}

// batchRenewer returns the renewer that renews lk's leases with others
// (see renewer.go), or nil when a goroutine of its own must: a lock of a
// quorum, a set, a semaphore or a read-write lock, or one behind the
// restart guard.
func (lk *Lock) batchRenewer() *renewer {
	if s, ok := lk.store.(redisStore); ok && s.guard == nil && !renewAlone.Load() {
		return s.renewer
	}
	return nil
}

// startRenewalLocked schedules the renewal on behalf of parent: a timer
// that starts the renewal goroutine when the first renewal is due, so that
// a lock released before then (most of them) costs no goroutine. lk.mu
// must be held.
func (lk *Lock) startRenewalLocked(parent context.Context) {
	ls := lk.lease
	ls.parent = parent
	if r := lk.batchRenewer(); r != nil {
		// (Still batched, for a parent that ended: the renewal in the
		// order, or in flight, now serves the new one.)
		if !ls.batched {
			ls.batched = true
			now := time.Now()
			lk.scheduleLocked(r, now, lk.untilRenewalLocked(now))
		}
		return
	}
	ls.firstPending.Add(1)
	ls.firstRenewal = time.AfterFunc(lk.untilRenewalLocked(time.Now()), lk.beginRenewal)
}

// beginRenewal starts the renewal goroutine when the first renewal is
// due, unless the renewal was stopped or its context ended meanwhile.
func (lk *Lock) beginRenewal() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls := lk.lease
	defer ls.firstPending.Done()
	if ls.firstRenewal == nil {
		return // stopped: see stopRenewal and endLeasesLocked
	}
	ls.firstRenewal = nil
	if ls.stopped || lk.released || lk.lost != nil || ls.parent.Err() != nil {
		return
	}
	rctx, cancel := context.WithCancel(ls.parent)
	done := make(chan struct{})
	ls.renewCancel, ls.renewDone = cancel, done
	if ls.reschedule == nil {
		ls.reschedule = make(chan struct{}, 1)
	}
	go lk.renew(rctx, cancel, done, ls.reschedule)
}

// rescheduleLocked makes the lease follow a TTL changed by Refresh: the
// watchdog fires at the new Deadline if that is earlier, and the renewal
// loop starts a new interval. lk.mu must be held.
func (lk *Lock) rescheduleLocked() {
	ls := lk.lease
	if ls == nil {
		return
	}
	now := time.Now()
	if ls.watchdog != nil {
		ls.watchdog.Reset(lk.untilWatchdogLocked(now))
	}
	if ls.batched {
		if ls.flight == nil {
			// (In flight, its result schedules the next renewal.)
			lk.scheduleLocked(lk.batchRenewer(), now, lk.untilRenewalLocked(now))
		}
		return
	}
	if ls.firstRenewal != nil {
		// Unless it has fired already: its renewal starts with the new
		// schedule anyway.
		if ls.firstRenewal.Stop() {
			ls.firstRenewal.Reset(lk.untilRenewalLocked(now))
		}
		return
	}
	select {
	case ls.reschedule <- struct{}{}:
	default:
	}
}

// stopFirstRenewalLocked cancels the timer of a renewal that has not
// started yet. If the timer has fired and its beginRenewal waits for
// lk.mu, that finds it stopped and starts nothing. lk.mu must be held.
func (lk *Lock) stopFirstRenewalLocked() {
	if t := lk.lease.firstRenewal; t != nil {
		if t.Stop() {
			lk.lease.firstPending.Done()
		}
		lk.lease.firstRenewal = nil
	}
}

// stopRenewal stops the renewal goroutine, if one runs, and waits for it to
// return, or for the renewer's renewal in flight to land. No renewal
// starts again until resumeRenewal. A lease in its renewer's order stays
// there, stopped: the renewer sends no renewal for it, but still arms its
// watchdog when it falls due (see boardRenewal), so that a Release that
// hangs past the Deadline loses the lock then, as the watchdog would have.
// The lease leaves the order when the lock ends (endLeasesLocked).
func (lk *Lock) stopRenewal() {
	lk.mu.Lock()
	ls := lk.lease
	if ls == nil {
		lk.mu.Unlock()
		return
	}
	ls.stopped = true
	lk.stopFirstRenewalLocked()
	cancel, done, flight := ls.renewCancel, ls.renewDone, ls.flight
	lk.mu.Unlock()
	// A first renewal that fired just now finds the renewal stopped.
	ls.firstPending.Wait()
	if cancel != nil {
		cancel()
		<-done
	}
	if flight != nil {
		<-flight
	}
}

// resumeRenewal undoes stopRenewal after a failed Release: the lock may
// still be held, so its leases go on renewing it.
func (lk *Lock) resumeRenewal() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls := lk.lease
	if ls == nil {
		return
	}
	ls.stopped = false
	if !lk.renewingLocked() && ls.parent != nil && ls.parent.Err() == nil && lk.lost == nil {
		lk.startRenewalLocked(ls.parent)
	}
}
