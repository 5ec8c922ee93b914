package locksmith

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/google/uuid"
	"github.com/locksmith-go/locksmith/internal/notify"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// Obtain: one attempt, try once or wait, and cleaning up after a failure.

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
		l.refused(ctx, key, opts, HoldLock, err)
		return nil, err
	}
	return l.obtain(ctx, key, &cfg)
}

// obtain is Obtain once its options are resolved; WithLock and Once
// share it. It reports the call to the observer and the tracer, if there
// are any.
func (l *Locker) obtain(ctx context.Context, key string, cfg *config) (*Lock, error) {
	if !l.hooked() {
		lk, _, err := l.obtainCounted(ctx, key, cfg)
		return lk, err
	}
	ctx, s := l.span(ctx, Call{Op: OpObtain, Key: key, Prefix: cfg.prefix, Hold: cfg.hold()})
	lk, tr, err := l.obtainObserved(ctx, key, cfg)
	s.end(Outcome{Err: err, Attempts: tr.attempts, HandedOver: tr.handedOver})
	return lk, err
}

// obtainObserved is obtain without its span (Campaign has its own), and
// also returns what it tried.
func (l *Locker) obtainObserved(ctx context.Context, key string, cfg *config) (*Lock, tries, error) {
	if !l.hooked() {
		return l.obtainCounted(ctx, key, cfg)
	}
	start := time.Now()
	lk, tr, err := l.obtainCounted(ctx, key, cfg)
	l.obtained(key, cfg.prefix, cfg.hold(), start, tr, lk, err)
	return lk, tr, err
}

// obtainCounted is obtain, and also returns what it tried.
func (l *Locker) obtainCounted(ctx context.Context, key string, cfg *config) (*Lock, tries, error) {
	if ctx.Err() != nil {
		return nil, tries{}, notObtained(ctx, key)
	}
	if err := l.verify(ctx, cfg, key, 0); err != nil {
		return nil, tries{}, err
	}
	rkey := cfg.prefix + key
	// The strategy's first delay decides between trying once and
	// waiting: a strategy that gives none (NoRetry, LimitRetry(s, 0))
	// makes one attempt, which sends one command and starts nothing.
	backoff := newBackoff(cfg.retry)
	delay, wait := backoff.Next()
	if !wait {
		lk, err := l.tryOnce(ctx, key, rkey, cfg)
		return lk, tries{attempts: 1}, err
	}
	// See wait.go for how waiting works, and handoff.go for how a
	// release hands the lock to a waiter.
	queue := l.queues(cfg)
	ch := keyslot.Companion(cfg.prefix, key, keyslot.Released)
	t := l.notify.Ticket(ch)
	if t.Queued {
		// Others of this Locker wait already: queue up behind them
		// rather than barge in.
		w := l.notify.Join(ctx, ch, t, noAttempt, newToken(cfg), queue, false, time.Time{})
		return l.wait(ctx, key, &lockAttempts{l, key, rkey, *cfg}, backoff, delay, w, tries{})
	}
	// A key this Locker has recently waited for is likely taken: try
	// with the script at once, rather than a plain SET and the script.
	mode := plainFirst
	if t.Existed {
		mode = scripted
	}
	token := newToken(cfg)
	start := time.Now()
	lk, res, err := l.tryObtain(ctx, key, rkey, cfg, mode, token, queue)
	if lk != nil || err != nil {
		return lk, tries{attempts: 1}, err
	}
	w := l.notify.Join(ctx, ch, t, res.attempt(), token, queue, false, start)
	return l.wait(ctx, key, &lockAttempts{l, key, rkey, *cfg}, backoff, delay, w, tries{attempts: 1})
}

// newToken returns a new token for an acquisition with cfg: a random
// UUID, followed, for an election's campaign, by a space and the
// candidate's value (see election.go).
func newToken(cfg *config) string {
	if cfg.election {
		return uuid.NewString() + " " + cfg.value
	}
	return uuid.NewString()
}

// tryOnce makes one attempt that does not wait: someone else holding the
// lock is an error matching ErrNotObtained.
func (l *Locker) tryOnce(ctx context.Context, key, rkey string, cfg *config) (*Lock, error) {
	lk, _, err := l.tryObtain(ctx, key, rkey, cfg, plainOnce, newToken(cfg), false)
	if lk == nil && err == nil {
		err = heldElsewhere(key)
	}
	return lk, err
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
	return settle(ctx, key, cfg, lk, start, res, err)
}

// settle completes an attempt for lk whose acquire was sent at start and
// answered res or err: it cleans up after a failure that may have landed,
// and checks that a success is still valid and was acknowledged as asked.
func settle(ctx context.Context, key string, cfg *config, lk *Lock, start time.Time, res acquireRes, err error) (*Lock, acquireRes, error) {
	if err != nil {
		var cleaned acquireRes
		if mayHaveLanded(err) {
			deleteIfOwned(ctx, lk)
			cleaned.cleaned = true
		}
		if ctx.Err() != nil {
			// The caller gave up mid-call: report it as such, whatever
			// the client made of the interrupted command.
			return nil, cleaned, notObtained(ctx, key)
		}
		return nil, cleaned, fmt.Errorf("locksmith: obtain %q: %w", key, err)
	}
	if !res.ok {
		return nil, res, nil
	}
	lk.fence = res.fence
	lk.deadline = start.Add(cfg.ttl - cfg.driftFor(cfg.ttl))
	if elapsed := time.Since(start); !time.Now().Before(lk.deadline) {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, fmt.Errorf("%w: the reply obtaining %q took %v, longer than its validity of %v",
			ErrLockLost, key, elapsed, lk.deadline.Sub(start))
	}
	if res.acked < cfg.replicas {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v; released it",
			ErrNotReplicated, res.acked, cfg.replicas, key, cfg.replicaWait)
	}
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, notObtained(ctx, key)
	}
	return lk, acquireRes{ok: true, more: res.more, mine: res.mine}, nil
}

// newLock makes the handle of an acquisition of rkey with token.
func (l *Locker) newLock(key, rkey string, cfg *config, token string) *Lock {
	lk := &Lock{store: l.store, key: key, token: token, cfg: *cfg, ttl: cfg.ttl, hold: cfg.hold()}
	lk.ref = lockRef{key: rkey, lockKey: rkey, token: token, fenceTTLMS: cfg.fenceTTLMS}
	lk.ref.channel = keyslot.Companion(cfg.prefix, key, keyslot.Released)
	if l.store.queues() {
		lk.ref.queue = keyslot.Companion(cfg.prefix, key, keyslot.Queue)
		if cfg.fencing {
			lk.ref.fence = keyslot.Companion(cfg.prefix, key, keyslot.Fence)
			if cfg.election {
				lk.ref.leader = keyslot.Companion(cfg.prefix, key, keyslot.Leader)
			}
		}
	}
	return lk
}

// handedOver returns the lock a release handed to waiter w, as h
// announced. Its validity runs from since, when w's first queued attempt
// was sent (see handoff.go).
func (l *Locker) handedOver(ctx context.Context, key, rkey string, cfg *config, w *notify.Waiter, h *notify.Handoff, since time.Time) (*Lock, error) {
	if l.extras == nil {
		// A quorum: its waiters are not queued, so no release hands them
		// the lock.
		return nil, fmt.Errorf("locksmith: %q: a quorum's locks are not handed over", key)
	}
	return l.claimHandoff(ctx, key, cfg, l.newLock(key, rkey, cfg, w.Token()), l.extras.confirm, w, h, since)
}

// claimHandoff returns lk, the handle of a lock (or permit) that a
// release handed to waiter w, as h announced, once it is sure of it, with
// confirm: see handedOver.
func (l *Locker) claimHandoff(ctx context.Context, key string, cfg *config, lk *Lock, confirm confirmFunc, w *notify.Waiter, h *notify.Handoff,
	since time.Time) (*Lock, error) {
	lk.fence = h.Fence
	lk.ttl = h.TTL
	drift := cfg.driftFor(h.TTL)
	lk.deadline = since.Add(h.TTL - drift)
	l.notify.Won(w, lk.deadline, false)
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, notObtained(ctx, key)
	}
	if time.Until(lk.deadline) < h.TTL/2 {
		// A long wait since the first queued attempt, or an
		// announcement heard late: start the TTL again, from a time
		// known, and learn the fence again. An announcement of a handoff
		// to w's token that expired since (a later release may have
		// handed the lock to the same token again) names that earlier
		// holding's fence, lower than those of the holders in between:
		// its deadline is past, so it always comes here.
		start := time.Now()
		ok, fence, err := confirm(ctx, lk.ref, h.TTL)
		switch {
		case err != nil || !ok:
			deleteIfOwned(ctx, lk)
			switch {
			case ctx.Err() != nil:
				return nil, notObtained(ctx, key)
			case err == nil:
				return nil, fmt.Errorf("%w: %q was handed over but expired before it could be refreshed", ErrLockLost, key)
			}
			return nil, fmt.Errorf("locksmith: confirm the handoff of %q: %w", key, err)
		}
		if lk.ref.fenced() {
			lk.fence = fence
		}
		lk.deadline = start.Add(h.TTL - drift)
		if elapsed := time.Since(start); !time.Now().Before(lk.deadline) {
			deleteIfOwned(ctx, lk)
			return nil, fmt.Errorf("%w: the reply confirming the handoff of %q took %v, longer than its validity of %v",
				ErrLockLost, key, elapsed, h.TTL-drift)
		}
	}
	return lk, nil
}

// leave takes w out of its queue once its Obtain call returns. A waiter
// that did not get the lock withdraws from the handoff queue, releasing
// the lock if it was handed over meanwhile.
func (l *Locker) leave(ctx context.Context, key, rkey string, cfg *config, w *notify.Waiter) {
	if l.notify.Leave(w) {
		deleteIfOwned(ctx, l.newLock(key, rkey, cfg, w.Token()))
	}
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
		lerr landedError
	)
	switch {
	case errors.As(err, &lerr):
		return true
	case errors.As(err, &rerr), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, ErrWrongKind):
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
