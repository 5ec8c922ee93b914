package locksmith

import (
	"context"
	"fmt"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// Obtain, and the lock as a kind of hold (see attempt.go).

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
	return l.acquire(ctx, key, &cfg, lockKind{})
}

// lockKind is a lock's kind: held by one owner at a time, handed over to
// a queued waiter on release.
type lockKind struct{}

func (lockKind) hold() Hold   { return HoldLock }
func (lockKind) needs() need  { return needLock }
func (lockKind) shares() bool { return false }

func (lockKind) handle(st store, lk *Lock) {
	lk.store = st
	if st.queues() && lk.cfg.fencing {
		lk.ref.fence = keyslot.Companion(lk.cfg.prefix, lk.key, keyslot.Fence)
	}
}

func (lockKind) take(ctx context.Context, st store, lk *Lock, mode acquireMode, queue bool, _ []string) (acquireRes, error) {
	cfg := &lk.cfg
	return st.acquire(ctx, acquireReq{lockRef: lk.ref, ttl: cfg.ttl, ttlMS: cfg.ttlMS, replicas: cfg.replicas,
		replicaWait: cfg.replicaWait, mode: mode, queue: queue})
}

// queues: quorums and locks that wait for replicas are not queued (see
// handoff.go).
func (lockKind) queues(st store, replicas int) bool { return st.queues() && replicas == 0 }
func (lockKind) handsOver(st store) bool            { return st.queues() }
func (lockKind) busy(key string) error              { return heldElsewhere(key) }

func heldElsewhere(key string) error {
	return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, key)
}
