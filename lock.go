package locksmith

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// maxCleanupWait bounds the calls that run after the caller's context may
// have ended: the best-effort delete after a failed or abandoned Obtain and
// the release at the end of WithLock.
const maxCleanupWait = 5 * time.Second

// lostReleaseWait bounds the release at the end of WithLock once the lock
// is lost or past its Deadline: its key is gone, or expires by itself
// within the drift allowance, so the release can at best free it a little
// early, and is not worth holding the caller up for.
const lostReleaseWait = time.Second

// A Locker hands out locks stored in one Redis deployment. It holds the
// client and the default options, and queues its callers that wait for a
// lock; it keeps no state for locks that are held, so one Locker can serve
// a whole process. A Locker is safe for concurrent use.
//
// While some of its Obtain calls wait, a Locker keeps one pub/sub
// connection open to hear of releases (on Redis Cluster, one per key
// waited on), read by a goroutine of its own; it closes that connection,
// and stops the goroutine, about half a second after the last wait ends.
// Close stops them at once and waits for them: call it when the Locker is
// no longer needed, before closing the client.
type Locker struct {
	store  store
	notify *notifier
	cfg    config
	quorum bool  // made by NewQuorum
	err    error // a bad client or default option given to New

	// verified is the union of the needs that the connected user was
	// found to have: see verify.
	verified atomic.Uint32
}

// New returns a Locker that stores locks through client, with opts as the
// defaults of every call. The client is used as it is: its timeouts, pool
// and retry settings apply to every command the Locker sends.
//
// New never fails; a nil client or an invalid option makes every call on
// the Locker return an error matching ErrInvalidArgument. It has no error
// to return because the mistakes it could report are fixed in code, not
// handled at run time, and a Locker is usually built beside its client,
// as a field or package variable, where an error would only be checked
// with a panic; the first call reports it instead, before sending
// anything. The zero Locker is not usable either: every call on it
// returns an error matching ErrInvalidArgument. The options given
// to New are checked together, against the package defaults, so an
// invalid default cannot be mended by a per-call option.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{cfg: defaultConfig()}
	if isNil(client) {
		l.err = fmt.Errorf("%w: nil Redis client", ErrInvalidArgument)
		return l
	}
	l.store = newScriptStore(client)
	l.notify = newNotifier(client)
	l.err = l.cfg.apply(opts)
	return l
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// usable reports why calls on l cannot run: an invalid argument to New, a
// zero Locker, or Close.
func (l *Locker) usable() error {
	switch {
	case l.err != nil:
		return l.err
	case l.store == nil:
		return fmt.Errorf("%w: a zero Locker; make one with New or NewQuorum", ErrInvalidArgument)
	case l.notify.isClosed.Load():
		return ErrClosed
	}
	return nil
}

// Close stops the Locker's background work and waits for it: the
// goroutines and pub/sub connections that hear release announcements.
// Obtain calls waiting at that moment return promptly with an error
// matching ErrClosed, after withdrawing from the lock's queue (they leave
// no lock and no queue entry behind); later calls on the Locker return
// ErrClosed without sending anything. Locks obtained before stay valid:
// they can still be refreshed and released, and their leases go on
// renewing them until released. Close does not close the Redis client,
// which belongs to the caller. It is safe to call more than once, and
// concurrently with other calls; it always returns nil.
func (l *Locker) Close() error {
	if l.notify != nil {
		l.notify.close()
	}
	return nil
}

// callConfig resolves the options for one call on key.
func (l *Locker) callConfig(key string, opts []Option) (config, error) {
	if err := l.usable(); err != nil {
		return config{}, err
	}
	if err := checkKey(key); err != nil {
		return config{}, err
	}
	if len(opts) == 0 {
		return l.cfg, nil
	}
	// Options are applied through an interface, which makes their
	// target escape: copy only when there are options.
	cfg := new(config)
	*cfg = l.cfg
	if err := cfg.apply(opts); err != nil {
		return config{}, err
	}
	if l.quorum {
		if err := cfg.checkQuorum(); err != nil {
			return config{}, err
		}
	}
	return *cfg, nil
}

// Obtain acquires the lock on key, stored in Redis at prefix+key with the
// TTL from the options, and returns a handle to it.
//
// When someone else holds the lock, Obtain follows the retry strategy: with
// the default, NoRetry, it returns an error matching ErrNotObtained at once;
// otherwise it waits and tries again until it wins, the strategy gives up
// (ErrNotObtained), or ctx ends (an error matching both ErrNotObtained and
// ctx.Err()), also when ctx ends while a request is in flight. It never
// waits longer than the holder's remaining TTL before the next attempt. A
// waiter is woken by the announcement of a release; a release that is not
// announced (another client's compare-and-delete or DEL, an expired key)
// is noticed within one of the strategy's delays and a round trip, for
// which the first waiter of each Locker and key tries once per delay.
//
// The first call of a Locker (and its first call that needs more, such as
// a first WithFencing) asks Redis, in one extra round trip, whether the
// user may run everything the call needs; if not, it returns an error
// matching ErrNoPermission before anything is written (see Check).
//
// Any other failure, such as Redis being unreachable or answering an error,
// is returned wrapped and does not match ErrNotObtained: the caller cannot
// tell whether someone holds the lock and should not proceed as if it did.
// If the reply to the acquire arrives after the lock's validity (TTL less
// the drift allowance) has run out, Obtain deletes the lock and returns an
// error matching ErrLockLost.
//
// Obtain leaves no lock behind when it fails: if the acquire may have
// reached Redis (a timeout, a dropped connection, ctx cancelled mid-call,
// a script refused after its write), it deletes the lock, if it is still
// its own, in a best-effort call bounded in time (at most 5s), which can
// make Obtain return that much later.
//
// ctx bounds the wait between attempts. Whether it also cuts short a
// command in flight is up to the client: go-redis applies a context's
// deadline to the socket only with Options.ContextTimeoutEnabled, and
// otherwise waits out its own read and write timeouts (3s by default).
// Enable it, or set short timeouts, where Obtain must return on time.
func (l *Locker) Obtain(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := l.callConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return l.obtain(ctx, key, &cfg)
}

func (l *Locker) obtain(ctx context.Context, key string, cfg *config) (*Lock, error) {
	if ctx.Err() != nil {
		return nil, notObtained(ctx, key)
	}
	if err := l.verify(ctx, cfg, key, 0); err != nil {
		return nil, err
	}
	rkey := cfg.prefix + key
	// The strategy's first delay decides between trying once and
	// waiting: a strategy that gives none (NoRetry, LimitRetry(s, 0))
	// makes one attempt, which sends one command and starts nothing.
	backoff := newBackoff(cfg.retry)
	delay, wait := backoff.Next()
	if !wait {
		return l.tryOnce(ctx, key, rkey, cfg)
	}
	// See notify.go for how waiting works, and handoff.go for how a
	// release hands the lock to a waiter.
	queue := l.queues(cfg)
	ch := companion(cfg.prefix, key, releasedKind)
	t := l.notify.ticket(ch)
	if t.queued {
		// Others of this Locker wait already: queue up behind them
		// rather than barge in.
		w := l.notify.join(ctx, ch, t, acquireRes{holderTTL: -1}, uuid.NewString(), queue, time.Time{})
		return l.wait(ctx, key, rkey, cfg, backoff, delay, w)
	}
	// A key this Locker has recently waited for is likely taken: try
	// with the script at once, rather than a plain SET and the script.
	mode := plainFirst
	if t.existed {
		mode = scripted
	}
	token := uuid.NewString()
	start := time.Now()
	lk, res, err := l.tryObtain(ctx, key, rkey, cfg, mode, token, queue)
	if lk != nil || err != nil {
		return lk, err
	}
	w := l.notify.join(ctx, ch, t, res, token, queue, start)
	return l.wait(ctx, key, rkey, cfg, backoff, delay, w)
}

// tryOnce makes one attempt that does not wait: someone else holding the
// lock is an error matching ErrNotObtained.
func (l *Locker) tryOnce(ctx context.Context, key, rkey string, cfg *config) (*Lock, error) {
	lk, _, err := l.tryObtain(ctx, key, rkey, cfg, plainOnce, uuid.NewString(), false)
	if lk == nil && err == nil {
		err = heldElsewhere(key)
	}
	return lk, err
}

// queues reports whether waiters with cfg are queued for handoffs (see
// handoff.go): not on a quorum, or with WithReplicas.
func (l *Locker) queues(cfg *config) bool {
	return !l.quorum && cfg.replicas == 0
}

// wait makes waiter w's attempts until it obtains the lock, the strategy
// gives up, or ctx ends. The first retry slot ends after delay.
func (l *Locker) wait(ctx context.Context, key, rkey string, cfg *config, backoff Backoff, delay time.Duration, w *waiter) (*Lock, error) {
	defer l.leave(ctx, key, rkey, cfg, w)
	slotEnd := time.Now().Add(max(delay, 0))
	timer := time.NewTimer(time.Until(slotEnd))
	defer timer.Stop()
	for {
		if l.notify.isClosed.Load() {
			return nil, closedErr(key)
		}
		if h, since := l.notify.takeHandoff(w); h != nil {
			return l.handedOver(ctx, key, rkey, cfg, w, h, since)
		}
		tryNow, tryAt, head := l.notify.plan(w)
		if !tryNow {
			wakeAt := slotEnd
			if !tryAt.IsZero() && tryAt.Before(wakeAt) {
				wakeAt = tryAt
			}
			timer.Reset(time.Until(wakeAt))
			select {
			case <-ctx.Done():
				return nil, notObtained(ctx, key)
			case <-w.wake:
				continue
			case <-timer.C:
			}
			now := time.Now()
			slotOver := !now.Before(slotEnd)
			// The head tries at the end of each slot, since a release
			// may not have been announced, and when the holder's TTL has
			// run out (or its queue entry is due for renewal).
			tryNow = (head && slotOver) || (!tryAt.IsZero() && !now.Before(tryAt))
			if !tryNow {
				if !slotOver {
					continue
				}
				// Behind the head: this slot passes without an attempt,
				// which the head would have won first.
				d, ok := backoff.Next()
				if !ok {
					return nil, heldElsewhere(key)
				}
				slotEnd = now.Add(max(d, 0))
				continue
			}
		}
		start := time.Now()
		l.notify.sending(w)
		lk, res, err := l.tryObtain(ctx, key, rkey, cfg, scripted, w.token, w.queue)
		if err != nil {
			return nil, err
		}
		l.notify.observe(time.Since(start))
		if lk != nil {
			l.notify.won(w, lk.Deadline())
			return lk, nil
		}
		l.notify.lost(w, res, start)
		// The strategy's budget is its delays: an attempt made within a
		// slot, because of an announcement or the holder's TTL, leaves
		// the slot running; one at or after its end starts the next.
		if now := time.Now(); !now.Before(slotEnd) {
			d, ok := backoff.Next()
			if !ok {
				return nil, heldElsewhere(key)
			}
			slotEnd = now.Add(max(d, 0))
		}
	}
}

// handedOver returns the lock a release handed to waiter w, as h
// announced. Its validity runs from since, when w's first queued attempt
// was sent (see handoff.go).
func (l *Locker) handedOver(ctx context.Context, key, rkey string, cfg *config, w *waiter, h *handoff, since time.Time) (*Lock, error) {
	lk := l.newLock(key, rkey, cfg, w.token)
	lk.fence = h.fence
	lk.ttl = h.ttl
	drift := cfg.driftFor(h.ttl)
	lk.deadline = since.Add(h.ttl - drift)
	l.notify.won(w, lk.deadline)
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, notObtained(ctx, key)
	}
	if time.Until(lk.deadline) < h.ttl/2 {
		// A long wait since the first queued attempt: start the TTL
		// again, from a time known.
		if err := lk.refresh(ctx, h.ttl, drift); err != nil {
			deleteIfOwned(ctx, lk)
			switch {
			case ctx.Err() != nil:
				return nil, notObtained(ctx, key)
			case errors.Is(err, ErrNotHeld):
				return nil, fmt.Errorf("%w: %q was handed over but expired before it could be refreshed", ErrLockLost, key)
			}
			return nil, err
		}
	}
	return lk, nil
}

// leave takes w out of its queue once its Obtain call returns. A waiter
// that did not get the lock withdraws from the handoff queue, releasing
// the lock if it was handed over meanwhile.
func (l *Locker) leave(ctx context.Context, key, rkey string, cfg *config, w *waiter) {
	if l.notify.leave(w) {
		deleteIfOwned(ctx, l.newLock(key, rkey, cfg, w.token))
	}
}

// holderExpiry returns when a holder whose remaining TTL an attempt
// reported will have lost the lock, or zero when its key has no expiry.
func holderExpiry(holderTTL time.Duration) time.Time {
	if holderTTL < 0 {
		return time.Time{}
	}
	// Redis reports whole milliseconds, rounded: allow one more.
	return time.Now().Add(holderTTL + time.Millisecond)
}

// newBackoff starts one call's retries; a strategy that returns no Backoff
// retries nothing.
func newBackoff(s RetryStrategy) Backoff {
	if b := s.NewBackoff(); b != nil {
		return b
	}
	return noRetry{}
}

func heldElsewhere(key string) error {
	return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, key)
}

func notObtained(ctx context.Context, key string) error {
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, ctx.Err())
}

// tryObtain makes one attempt, with token, queued for a handoff if queue
// is set. It returns the lock, or, when someone else holds it, what the
// attempt learned of the holder (its remaining TTL, negative when unknown,
// and its token if the attempt was queued), or an error for anything else.
// mode says which commands to send (see acquireMode).
func (l *Locker) tryObtain(ctx context.Context, key, rkey string, cfg *config, mode acquireMode, token string, queue bool) (*Lock, acquireRes, error) {
	// The handle is made first: the store's arguments live in it, so that
	// they are built once per lock.
	lk := l.newLock(key, rkey, cfg, token)
	req := acquireReq{lockRef: lk.ref, ttl: cfg.ttl, ttlMS: cfg.ttlMS, replicas: cfg.replicas, replicaWait: cfg.replicaWait,
		mode: mode, queue: queue}
	start := time.Now()
	res, err := l.store.acquire(ctx, req)
	if err != nil {
		if mayHaveLanded(err) {
			deleteIfOwned(ctx, lk)
		}
		if ctx.Err() != nil {
			// The caller gave up mid-call: report it as such, whatever
			// the client made of the interrupted command.
			return nil, acquireRes{}, notObtained(ctx, key)
		}
		return nil, acquireRes{}, fmt.Errorf("locksmith: obtain %q: %w", key, err)
	}
	if !res.ok {
		return nil, res, nil
	}
	lk.fence = res.fence
	lk.deadline = start.Add(cfg.ttl - cfg.driftFor(cfg.ttl))
	if elapsed := time.Since(start); !time.Now().Before(lk.deadline) {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{}, fmt.Errorf("%w: the reply obtaining %q took %v, longer than its validity of %v",
			ErrLockLost, key, elapsed, lk.deadline.Sub(start))
	}
	if res.acked < cfg.replicas {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{}, fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v; released it",
			ErrNotReplicated, res.acked, cfg.replicas, key, cfg.replicaWait)
	}
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{}, notObtained(ctx, key)
	}
	return lk, acquireRes{}, nil
}

// newLock makes the handle of an acquisition of rkey with token.
func (l *Locker) newLock(key, rkey string, cfg *config, token string) *Lock {
	lk := &Lock{store: l.store, key: key, token: token, cfg: *cfg, ttl: cfg.ttl}
	lk.keyBuf[0] = rkey
	lk.ref = lockRef{keys: lk.keyBuf[:1], lockKey: rkey, token: token, fenceTTLMS: cfg.fenceTTLMS}
	lk.ref.channel = companion(cfg.prefix, key, releasedKind)
	if !l.quorum {
		lk.keyBuf[1] = companion(cfg.prefix, key, queueKind)
		lk.ref.keys = lk.keyBuf[:2]
		if cfg.fencing {
			lk.keyBuf[2] = companion(cfg.prefix, key, fenceKind)
			lk.ref.keys = lk.keyBuf[:3]
		}
	}
	return lk
}

// mayHaveLanded reports whether a command that failed with err may still
// have taken the lock. A script may have failed after its SET (Redis does
// not undo what a script wrote before an error); an error reply to a
// single command means it did nothing, and a failed dial or an exhausted
// pool means nothing was sent; anything else (timeouts, dropped
// connections, cancellation mid-call) leaves it unknown.
func mayHaveLanded(err error) bool {
	var (
		rerr redis.Error
		oerr *net.OpError
		serr scriptError
	)
	switch {
	case errors.As(err, &serr):
		return true
	case errors.As(err, &rerr), errors.Is(err, redis.ErrPoolTimeout):
		return false
	case errors.As(err, &oerr) && oerr.Op == "dial":
		return false
	}
	return true
}

// deleteIfOwned releases lk's lock if its key still holds lk's token, and
// otherwise withdraws lk's token from the handoff queue, where an attempt
// may have put it; on a context that outlives the caller's cancellation
// but is bounded in time. Its error is dropped: the lock expires with its
// TTL anyway, and a queue entry lapses.
func deleteIfOwned(ctx context.Context, lk *Lock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCleanupWait)
	defer cancel()
	_, _ = lk.store.withdraw(ctx, lk.ref, lk.cfg.ttl.Milliseconds())
}

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
// nil. That includes the release
// finding the lock already gone, which is also what a release looks like
// when its reply was lost and the client resent it after the first one
// had deleted the key: a false alarm, on the safe side.
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
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, err := l.callConfig(key, opts)
	if err != nil {
		return err
	}
	return l.withLock(ctx, key, &cfg, fn, nil)
}

// withLock is WithLock once its arguments are checked; Once shares it.
// When fn returns nil (not when it panics) and the lock was not found lost
// while it ran, finish, if not nil, ends the lock instead of Release. It
// must do what Release does, and report a lock that was gone with an error
// matching ErrNotHeld.
func (l *Locker) withLock(ctx context.Context, key string, cfg *config, fn func(ctx context.Context) error,
	finish func(ctx context.Context, lk *Lock) error) (err error) {
	lk, err := l.obtain(ctx, key, cfg)
	if err != nil {
		return err
	}
	// The lease ends with this call even if the release fails (the lock
	// then expires with its TTL): nothing renews a lock nobody uses.
	leaseCtx, endLease := lk.leaseWithCancel(ctx)
	returned := false
	defer func() {
		// This also runs while a panic from fn unwinds; the panic then
		// continues with its original stack.
		defer endLease(nil)
		lost := lk.lostCause()
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), releaseDeadline(lk, lost != nil))
		var relErr error
		if finish != nil && returned && err == nil && lost == nil {
			relErr = finish(rctx, lk)
		} else {
			relErr = lk.Release(rctx)
		}
		cancel()
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
	return err
}

// releaseDeadline returns when the release at the end of WithLock gives
// up, as WithLock describes; lost is whether the lock is known lost.
func releaseDeadline(lk *Lock, lost bool) time.Time {
	now := time.Now()
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

// A Lock is a handle to one acquisition of a lock. Its methods are safe for
// concurrent use. A handle never affects a lock it does not hold: once the
// key expires or holds another token, every method that would touch it
// returns an error matching ErrNotHeld instead.
type Lock struct {
	store store
	key   string // as the caller gave it
	token string
	fence int64 // 0 without fencing
	cfg   config

	// ref is what the store needs to act on this lock; its keys live in
	// keyBuf: the lock key, its handoff queue's (except on a quorum) and,
	// with fencing, its fence counter's.
	ref    lockRef
	keyBuf [3]string

	releaseMu sync.Mutex // held for the whole of Release, so releases run one at a time

	mu       sync.Mutex    // guards the fields below
	ttl      time.Duration // the TTL of the last successful acquire or refresh
	deadline time.Time     // local end of validity: see Deadline
	released bool          // Release has deleted the key or found it gone
	lost     error         // why the lock was lost; nil while it is not
	lease    *leaseState   // nil until the first Lease call
}

// Key returns the key as given to Obtain, without the prefix.
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
func (lk *Lock) Fence() int64 { return lk.fence }

// Deadline returns the local, conservative end of the lock's validity: the
// time taken just before the acquire (or the last successful refresh) was
// sent, plus the TTL, minus the drift allowance. Until then no other client
// can hold the lock, as long as the holder's and the server's clocks drift
// apart by less than the allowance and the server does not lose the key (a
// restart without persistence, a failover). Past it the holder must assume
// it has lost the lock.
func (lk *Lock) Deadline() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
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
		return 0, fmt.Errorf("locksmith: TTL of %q: %w", lk.key, err)
	}
	if !held {
		return 0, lk.notHeld()
	}
	return ttl, nil
}

// Refresh resets the lock's time to live to ttl, if the lock is still held
// by this handle, and moves the Deadline accordingly; later lease renewals
// use the new TTL. ttl must be at least 1ms.
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
	drift := lk.cfg.driftFor(ttl)
	if drift >= ttl {
		return fmt.Errorf("%w: drift allowance %v must be shorter than the TTL %v", ErrInvalidArgument, drift, ttl)
	}
	if every := lk.cfg.renewEvery; every >= ttl {
		return fmt.Errorf("%w: renew interval %v must be shorter than the TTL %v", ErrInvalidArgument, every, ttl)
	}
	return lk.refresh(ctx, ttl, drift)
}

func (lk *Lock) refresh(ctx context.Context, ttl, drift time.Duration) error {
	if err := lk.heldLocally(); err != nil {
		return err
	}
	start := time.Now()
	ok, err := lk.store.refresh(ctx, lk.ref, ttl)
	if err != nil {
		return fmt.Errorf("locksmith: refresh %q: %w", lk.key, err)
	}
	if !ok {
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
func (lk *Lock) finish(ctx context.Context, verb string, op func(context.Context, *Lock) (bool, error)) error {
	lk.releaseMu.Lock()
	defer lk.releaseMu.Unlock()
	if lk.isReleased() {
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, lk.key)
	}
	lk.stopRenewal()
	ok, err := op(ctx, lk)
	if err != nil {
		lk.resumeRenewal()
		return fmt.Errorf("locksmith: %s %q: %w", verb, lk.key, err)
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

// heldLocally returns an error matching ErrNotHeld when the handle itself
// knows the lock is gone, so that no command needs to be sent.
func (lk *Lock) heldLocally() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	switch {
	case lk.released:
		return fmt.Errorf("%w: %q was released", ErrNotHeld, lk.key)
	case lk.lost != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, lk.lost)
	}
	return nil
}

func (lk *Lock) notHeld() error {
	return fmt.Errorf("%w: %q expired or is held by another owner", ErrNotHeld, lk.key)
}

// lostCause returns why the lock was lost, or nil.
func (lk *Lock) lostCause() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.lost
}
