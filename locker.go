package locksmith

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/locksmith-go/locksmith/internal/notify"
	"github.com/redis/go-redis/v9"
)

// The Locker: what it holds, and how it is made and closed (WithLock is
// in withlock.go).

// maxCleanupWait bounds the calls that run after the caller's context may
// have ended: the best-effort delete after a failed or abandoned Obtain and
// the release at the end of WithLock.
const maxCleanupWait = 5 * time.Second

// A Locker hands out locks stored in one Redis deployment. It holds the
// client and the default options, and queues its callers that wait for a
// lock; it keeps no state for locks that are held, so one Locker can serve
// a whole process. A Locker is safe for concurrent use.
//
// While some of its Obtain calls wait, a Locker keeps one pub/sub
// connection open to hear of releases (on Redis Cluster, one per shard
// it waits on), read by a goroutine of its own; it closes that connection,
// and stops the goroutine, about half a second after the last wait ends.
// Close stops them at once and waits for them: call it when the Locker is
// no longer needed, before closing the client. The leases of its locks
// are renewed by a timer's callback (see Lock.Lease), which, as the
// leases do, outlives Close.
type Locker struct {
	store store
	// extras serves semaphores, read-write locks, Once, Inspect and
	// elections, and confirms handoffs: the store itself from New, nil on
	// a quorum (whose store's allows refuses those calls first).
	extras extras
	notify *notify.Notifier
	cfg    config
	err    error // a bad client or default option given to New

	// verified is the union of the needs that the connected user was
	// found to have: see verify.
	verified atomic.Uint32

	boxes msBoxes // the last per-call TTLs, ready for go-redis

	obs    *observer // nil without WithObserver
	tracer Tracer    // nil without WithTracer
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
	t := topologyOf(client)
	s := newRedisStore(t)
	if l.err = l.cfg.apply(opts, &l.boxes); l.err == nil && l.cfg.restartGuard {
		s.guard, l.err = l.cfg.newGuard(t)
	}
	l.store, l.extras = s, s
	l.observe(opts)
	l.notify = l.newNotifier(t)
	return l
}

// newGuard returns the restart guard of a store on t, with the Locker's
// maximum TTL, which it sets to the default TTL when no WithMaxTTL gave
// one.
func (c *config) newGuard(t topology) (*guard, error) {
	if c.maxTTL == 0 {
		c.maxTTL = c.ttl
	}
	return newGuard(t, c.maxTTL, c.persistent)
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
	case l.notify.IsClosed():
		return ErrClosed
	}
	return nil
}

// observe sets up the observer and the tracer that opts give, if any
// (see WithObserver and WithTracer).
func (l *Locker) observe(opts []Option) {
	l.obs = observerOf(opts)
	l.tracer = tracerOf(opts)
}

// newNotifier returns the notifier of l, whose client is t's: it reports
// the states of its pub/sub connections to l's observer, if l has one
// (observe must have set it up).
func (l *Locker) newNotifier(t topology) *notify.Notifier {
	var onConn func(notify.ConnEvent)
	if ob := l.obs; ob != nil {
		onConn = ob.connEvent
	}
	return notify.New(t.client, t.cluster, onConn)
}

// Close stops the Locker's background work and waits for it: the
// goroutines and pub/sub connections that hear release announcements,
// the goroutines of Election.Observe, on a quorum the goroutines that
// ask its masters, and the goroutine that delivers events to an observer
// (see WithObserver), once it has delivered those already buffered.
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
		l.notify.Close()
	}
	if l.store != nil {
		l.store.close()
	}
	l.obs.close()
	return nil
}

// callConfig resolves the options for one call on key, a lock call.
func (l *Locker) callConfig(key string, opts []Option) (config, error) {
	return l.callConfigFor(key, opts, callLock)
}

// callConfigFor resolves the options for one call of kind c on key, and
// checks that the Locker's store can serve it.
func (l *Locker) callConfigFor(key string, opts []Option, c callKind) (config, error) {
	if err := l.usable(); err != nil {
		return config{}, err
	}
	if err := checkKey(key); err != nil {
		return config{}, err
	}
	if len(opts) == 0 {
		if c != callLock {
			if err := l.allows(l.cfg.usage(c), key); err != nil {
				return config{}, err
			}
		}
		return l.cfg, nil
	}
	if err := lockerOnly(opts); err != nil {
		return config{}, err
	}
	cfg := l.cfg
	if err := cfg.apply(opts, &l.boxes); err != nil {
		return config{}, err
	}
	if err := l.allows(cfg.usage(c), key); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// lockerOnly refuses, for a single call, the options that only New and
// NewQuorum take.
func lockerOnly(opts []Option) error {
	for _, o := range opts {
		switch o.kind {
		case optObserver:
			return fmt.Errorf("%w: WithObserver is an option of New, not of a single call", ErrInvalidArgument)
		case optTracer:
			return fmt.Errorf("%w: WithTracer is an option of New, not of a single call", ErrInvalidArgument)
		case optMaxTTL:
			return fmt.Errorf("%w: WithMaxTTL is an option of New and NewQuorum, not of a single call", ErrInvalidArgument)
		case optRestartGuard:
			return fmt.Errorf("%w: WithRestartGuard is an option of New, not of a single call", ErrInvalidArgument)
		case optPersistentMaster:
			return fmt.Errorf("%w: WithPersistentMaster is an option of New and NewQuorum, not of a single call", ErrInvalidArgument)
		}
	}
	return nil
}

// allows returns nil when a call u on key can be served: by its kind
// (semaphores and read-write locks take no WithReplicas) and by the store.
func (l *Locker) allows(u usage, key string) error {
	if u.replicas > 0 && (u.kind == callSemaphore || u.kind == callRW) {
		return fmt.Errorf("%w: WithReplicas on %q: not supported for semaphores and read-write locks", ErrInvalidArgument, key)
	}
	return l.store.allows(u)
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
		l.refused(ctx, key, opts, HoldLock, err)
		return nil, err
	}
	return l.acquire(ctx, key, &cfg, lockKind{})
}
