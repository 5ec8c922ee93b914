package locksmith

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// A Semaphore lets at most a fixed number of holders hold one of its
// permits at a time, across every process that uses the same key: "at
// most three workers call the payment API at once". Each permit is leased
// like a lock: it has its own TTL, so the permit of a holder that crashed
// comes back when its TTL runs out, without anyone's help, and it is held
// through a *Lock handle with the same methods (Release, Refresh, TTL,
// Deadline, Lease, Token, Fence).
//
// The permits live in one Redis sorted set at the semaphore's key (prefix
// plus key, as for a lock), each scored by when it expires. Whether a
// permit is free is decided atomically, in one script, by the Redis
// server's clock: at most n unexpired permits exist at any moment, when
// every caller passes the same n. A name is one kind of lock: Obtain on a
// semaphore's key fails with a Redis WRONGTYPE error, and Acquire on a
// lock's key does too; Acquire on a read-write lock's key, and a read or
// write on a semaphore's, fail with ErrWrongKind.
//
// Waiting works as for Obtain: a waiter whose attempt finds every permit
// held is queued in the semaphore's handoff queue, and a release hands
// its permit straight to the first live entry there, in the same step,
// and announces it: the permit passes from one holder to the next in the
// release's one round trip, Lockers are served first come, first served,
// and callers of one Locker in arrival order. A permit that expires
// unreleased (its holder crashed) is noticed within the retry strategy's
// delay, or when the earliest permit's TTL runs out, which every refused
// attempt reports.
//
// A Semaphore is a small value that holds no state of its own; make one
// with Locker.Semaphore wherever it is needed. Its methods are safe for
// concurrent use.
type Semaphore struct {
	l     *Locker
	key   string
	limit int
}

// Semaphore returns the semaphore named key with n permits. Like New, it
// never fails: an n under 1 (or an invalid key) makes every call on the
// semaphore return an error matching ErrInvalidArgument, before sending
// anything.
//
// The limit belongs to each call, not to the key: an Acquire with limit
// n succeeds only while fewer than n unexpired permits are held, whatever
// limits their holders used. So callers that pass different limits for
// one key (as during a rolling change of the limit) hold at most as many
// permits at once as the largest limit among them, and those with a
// smaller limit wait until the count falls below theirs.
func (l *Locker) Semaphore(key string, n int) *Semaphore {
	return &Semaphore{l: l, key: key, limit: n}
}

// Key returns the semaphore's key, without the prefix.
func (s *Semaphore) Key() string { return s.key }

// Limit returns how many permits the semaphore's calls allow at once.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes one of the semaphore's permits and returns its handle.
// It takes the same options as Obtain, except WithReplicas, and behaves
// like it: with the default NoRetry it tries once and fails with an error
// matching ErrNotObtained when all permits are held; with a retry strategy
// it waits as Obtain does (see Semaphore). The permit's TTL is the
// WithTTL option's; Release gives it back, Refresh and Lease renew it,
// and with WithFencing its Fence is larger than that of every permit of
// the semaphore acquired before it.
//
// A Redis failure is returned as such, never as "all permits are held",
// and an Acquire that fails leaves no permit behind (it removes its own,
// in a call bounded in time, when the attempt may have reached Redis).
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	cfg, err := s.config(opts)
	if err != nil {
		s.refused(ctx, opts, err)
		return nil, err
	}
	return s.acquire(ctx, &cfg)
}

// WithPermit runs fn while holding one of the semaphore's permits, as
// WithLock does for a lock: it acquires a permit (waiting as the options
// say), runs fn with a context that is cancelled if the permit is lost,
// renews the permit while fn runs, and gives it back when fn returns or
// panics. It returns fn's error, joined with an error matching
// ErrLockLost when the permit was lost while fn ran.
func (s *Semaphore) WithPermit(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	if s != nil && s.l.tracing() {
		return s.l.traced(ctx, Call{Op: OpWithLock, Key: s.key, Prefix: s.l.prefixOf(opts), Hold: HoldPermit},
			func(ctx context.Context) (bool, error) { return s.withPermit(ctx, fn, opts) })
	}
	_, err := s.withPermit(ctx, fn, opts)
	return err
}

// withPermit is WithPermit, once traced.
func (s *Semaphore) withPermit(ctx context.Context, fn func(ctx context.Context) error, opts []Option) (failed bool, err error) {
	if fn == nil {
		err := fmt.Errorf("%w: nil function", ErrInvalidArgument)
		s.refused(ctx, opts, err)
		return false, err
	}
	cfg, err := s.config(opts)
	if err != nil {
		s.refused(ctx, opts, err)
		return false, err
	}
	lk, err := s.acquire(ctx, &cfg)
	if err != nil {
		return false, err
	}
	return runHeld(ctx, lk, fn, nil)
}

// config resolves the options of one call on s.
func (s *Semaphore) config(opts []Option) (config, error) {
	switch {
	case s == nil || s.l == nil:
		return config{}, fmt.Errorf("%w: a zero Semaphore; make one with Locker.Semaphore", ErrInvalidArgument)
	case s.limit < 1:
		return config{}, fmt.Errorf("%w: semaphore %q has limit %d; it must be at least 1", ErrInvalidArgument, s.key, s.limit)
	}
	return s.l.callConfigFor(s.key, opts, callSemaphore)
}

// refused reports a call on s refused for its arguments (see
// Locker.refused).
func (s *Semaphore) refused(ctx context.Context, opts []Option, err error) {
	if s != nil && s.l != nil {
		s.l.refused(ctx, s.key, opts, HoldPermit, err)
	}
}

func (s *Semaphore) acquire(ctx context.Context, cfg *config) (*Lock, error) {
	return s.l.acquire(ctx, s.key, cfg, permitKind{s.limit})
}

// permitKind is a permit of a semaphore with a limit: one of limit holds
// of its key, handed over to a queued waiter on release.
type permitKind struct{ limit int }

func (permitKind) hold() Hold   { return HoldPermit }
func (permitKind) needs() need  { return needSemaphore }
func (permitKind) shares() bool { return true }

func (permitKind) handle(st stores, lk *Lock) {
	lk.store = st.extras.permits()
	if lk.fencing {
		lk.ref.fence = keyslot.Companion(lk.cfg.prefix, lk.key, keyslot.Fence)
	}
}

func (k permitKind) take(ctx context.Context, st stores, lk *Lock, _ acquireMode, queue bool, peers []string) (acquireRes, error) {
	return st.extras.acquirePermit(ctx, permitReq{lockRef: lk.ref, ttlMS: lk.cfg.ttlMS, limit: k.limit, queue: queue, peers: peers})
}

// queues: a waiter's entry in the handoff queue lapses unless its
// attempts renew it.
func (permitKind) queues(stores, int) bool { return true }

func (permitKind) handoff(st stores) handoff {
	if !st.core.queues() {
		return nil
	}
	return permitHandoff{}
}

func (k permitKind) busy(key string) error {
	return fmt.Errorf("%w: all %d permits of semaphore %q are held", ErrNotObtained, k.limit, key)
}

// A SemaphoreStatus is what Redis holds for one semaphore, as
// Semaphore.Inspect reads it.
type SemaphoreStatus struct {
	// Holders are the unexpired permits, the one that expires first
	// first.
	Holders []PermitHolder
	// Fence is the last fencing token issued for the key (see
	// WithFencing), or 0 when none was.
	Fence int64
	// Queued is the number of waiters queued for a handoff of a permit:
	// about one per Locker with Acquire calls waiting for one, plus, for
	// at most 5s, one for each goroutine whose first attempt raced with
	// another of the same Locker's (see docs/behaviour.md). Waiters on a
	// Locker from NewQuorum are not queued (it refuses semaphores).
	Queued int
	// Listening is how many pub/sub connections listen for the
	// semaphore's releases: about one per Locker with Acquire calls
	// waiting for a permit (a Locker keeps listening for half a second
	// after its last wait). It is -1 when they could not be counted:
	// PUBSUB NUMSUB (SHARDNUMSUB on Redis Cluster) was refused.
	Listening int
}

// A PermitHolder is one permit of a semaphore.
type PermitHolder struct {
	// Token is the permit's token (see Lock.Token).
	Token string
	// TTL is the permit's remaining time to live, by the server's clock.
	TTL time.Duration
}

// Inspect reads the state of the semaphore, for status pages and
// operators: who holds its permits and for how long, the last fencing
// token issued for it, how many waiters are queued for a permit, and how
// many Lockers listen for its releases. It
// changes nothing and holds no permit. The permits and the fence are read
// in one step; the listeners just after. The options are checked as for
// Acquire, but only the prefix matters.
func (s *Semaphore) Inspect(ctx context.Context, opts ...Option) (SemaphoreStatus, error) {
	cfg, err := s.config(opts)
	if err != nil {
		return SemaphoreStatus{}, err
	}
	k := keysOf(cfg.prefix, s.key)
	raw, err := s.l.extras.inspectPermits(ctx, k)
	if err != nil {
		return SemaphoreStatus{}, fmt.Errorf("locksmith: inspect semaphore %q: %w", s.key, err)
	}
	st := SemaphoreStatus{Holders: raw.holders, Queued: int(raw.queued), Listening: int(raw.listening)}
	if raw.hasFence {
		st.Fence, err = strconv.ParseInt(raw.fence, 10, 64)
		if err != nil {
			return SemaphoreStatus{}, fmt.Errorf("locksmith: fence counter of %q at %q is not one WithFencing wrote: %w", s.key, k.Fence, err)
		}
	}
	return st, nil
}
