package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// recorder is an Observer that keeps every event it is given.
type recorder struct {
	mu     sync.Mutex
	events []locksmith.Event
}

func (r *recorder) Observe(e locksmith.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// all returns the events so far.
func (r *recorder) all() []locksmith.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]locksmith.Event(nil), r.events...)
}

// find returns the first event so far that match accepts.
func (r *recorder) find(match func(locksmith.Event) bool) (locksmith.Event, bool) {
	for _, e := range r.all() {
		if match(e) {
			return e, true
		}
	}
	return locksmith.Event{}, false
}

// waitFor waits until an event that match accepts has been delivered,
// and returns the first such event.
func (r *recorder) waitFor(t *testing.T, what string, match func(locksmith.Event) bool) locksmith.Event {
	t.Helper()
	var got locksmith.Event
	eventually(t, 5*time.Second, func() bool {
		var ok bool
		got, ok = r.find(match)
		return ok
	}, "an event: %s; got %v", what, describe(r))
	return got
}

// describe lists what r has recorded, for failure messages.
func describe(r *recorder) string {
	var b strings.Builder
	for _, e := range r.all() {
		fmt.Fprintf(&b, "\n  %s %s hold=%s class=%s once=%s conn=%s err=%v", e.Kind, e.Key, e.Hold, e.Class, e.Once, e.Conn, e.Err)
	}
	return b.String()
}

// kindKey matches the events of kind k for key.
func kindKey(k locksmith.EventKind, key string) func(locksmith.Event) bool {
	return func(e locksmith.Event) bool { return e.Kind == k && e.Key == key }
}

// observed returns a Locker on the shared real server that reports to a
// new recorder, with opts.
func observed(t *testing.T, client redis.UniversalClient, opts ...locksmith.Option) (*locksmith.Locker, *recorder) {
	t.Helper()
	rec := &recorder{}
	return newLocker(t, client, append(opts, locksmith.WithObserver(rec))...), rec
}

func TestObserverObtainAndRelease(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	l, rec := observed(t, srv.Client(t), locksmith.WithPrefix("obs:"))
	key := uniqueKey(t)

	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	got := rec.waitFor(t, "obtained", kindKey(locksmith.EventObtain, key))
	require.Equal(t, locksmith.HoldLock, got.Hold)
	require.Equal(t, "obs:", got.Prefix)
	require.Equal(t, 1, got.Attempts)
	require.False(t, got.HandedOver)
	require.NoError(t, got.Err)
	require.Equal(t, locksmith.ClassNone, got.Class)
	require.Positive(t, got.Waited)
	require.False(t, got.Time.IsZero())

	_, err = l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	got = rec.waitFor(t, "not obtained", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventObtain && e.Key == key && e.Err != nil
	})
	require.Equal(t, locksmith.ClassNotObtained, got.Class)
	require.ErrorIs(t, got.Err, locksmith.ErrNotObtained)
	require.Equal(t, 1, got.Attempts)

	require.NoError(t, lk.Release(ctx))
	got = rec.waitFor(t, "released", kindKey(locksmith.EventRelease, key))
	require.NoError(t, got.Err)
	require.Positive(t, got.Held)
	require.Equal(t, locksmith.HoldLock, got.Hold)

	// A second Release is a release too: of a lock not held.
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
	got = rec.waitFor(t, "released again", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventRelease && e.Key == key && e.Err != nil
	})
	require.Equal(t, locksmith.ClassNotHeld, got.Class)

	for _, e := range rec.all() {
		require.NotContains(t, fmt.Sprintf("%+v", e), lk.Token(), "an event carries the token")
	}
}

func TestObserverRefusedCalls(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	l, rec := observed(t, srv.Client(t))

	_, err := l.Obtain(ctx, "")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	got := rec.waitFor(t, "invalid", kindKey(locksmith.EventObtain, ""))
	require.Equal(t, locksmith.ClassInvalid, got.Class)
	require.Zero(t, got.Attempts)

	// An observer belongs to the Locker: a call refuses one.
	key := uniqueKey(t)
	_, err = l.Obtain(ctx, key, locksmith.WithObserver(&recorder{}))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	got = rec.waitFor(t, "per-call observer", kindKey(locksmith.EventObtain, key))
	require.Equal(t, locksmith.ClassInvalid, got.Class)

	// And a nil observer is no observer.
	bad := newLocker(t, srv.Client(t), locksmith.WithObserver(nil))
	_, err = bad.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
}

func TestObserverRedisError(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	f := &fault{}
	l, rec := observed(t, newClient(t, srv.Options(), []redis.Hook{f}))
	require.NoError(t, l.Check(ctx))
	key := uniqueKey(t)
	f.failScripts.Store(true)
	_, err := l.Obtain(ctx, key)
	require.Error(t, err)
	got := rec.waitFor(t, "redis error", kindKey(locksmith.EventObtain, key))
	require.Equal(t, locksmith.ClassRedis, got.Class)
	require.Equal(t, err, got.Err)
}

func TestObserverReleaseOfExpiredLock(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := srv.Client(t)
	l, rec := observed(t, c)
	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key, locksmith.WithTTL(50*time.Millisecond))
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return c.Exists(ctx, key).Val() == 0 }, "%q expired", key)
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
	got := rec.waitFor(t, "release of an expired lock", kindKey(locksmith.EventRelease, key))
	require.Equal(t, locksmith.ClassNotHeld, got.Class)
	require.GreaterOrEqual(t, got.Held, 50*time.Millisecond)
}

// A waiter handed the lock by the holder's release: its event says so,
// and its Locker's pub/sub connection comes up and, once nobody waits,
// closes.
func TestObserverHandoffAndSubscriber(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := newLocker(t, srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	l, rec := observed(t, srv.Client(t))
	got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
	rec.waitFor(t, "subscriber up", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventSubscriber && e.Conn == locksmith.ConnUp
	})
	eventually(t, 5*time.Second, func() bool { return locksmith.QueuedWaiters(l, plainNames(key).Channel) == 1 }, "the waiter queued")
	require.NoError(t, holder.Release(ctx))
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	ev := rec.waitFor(t, "handed over", kindKey(locksmith.EventObtain, key))
	require.True(t, ev.HandedOver, "HandedOver")
	require.NoError(t, ev.Err)
	// The attempt that queued it, and maybe the one on its subscription's
	// confirmation: none after the release.
	require.LessOrEqual(t, ev.Attempts, 2)
	require.Positive(t, ev.Waited)
	up, _ := rec.find(func(e locksmith.Event) bool { return e.Kind == locksmith.EventSubscriber })
	require.Equal(t, locksmith.ConnUp, up.Conn)
	require.Equal(t, 1, up.Attempts)
	require.NoError(t, res.lk.Release(ctx))
	rec.waitFor(t, "subscriber closed once nobody waits", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventSubscriber && e.Conn == locksmith.ConnClosed
	})
}

// A waiter that cannot hear announcements (its user may not subscribe)
// finds the lock (or the permit) handed over by its next attempt:
// HandedOver is set all the same, since the release gave it the lock.
func TestObserverHandedOverUnheard(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, "~locksmith:*", "resetchannels", "+@all", "-@dangerous")
	t.Run("lock", func(t *testing.T) {
		handedOverUnheard(t, client, admin, func(ctx context.Context, l *locksmith.Locker, key string, opts ...locksmith.Option) (*locksmith.Lock, error) {
			return l.Obtain(ctx, key, opts...)
		})
	})
	t.Run("permit", func(t *testing.T) {
		handedOverUnheard(t, client, admin, func(ctx context.Context, l *locksmith.Locker, key string, opts ...locksmith.Option) (*locksmith.Lock, error) {
			return l.Semaphore(key, 1).Acquire(ctx, opts...)
		})
	})
}

// handedOverUnheard runs TestObserverHandedOverUnheard with take, which
// takes a lock or a permit on key with l.
func handedOverUnheard(t *testing.T, client, admin *redis.Client,
	take func(ctx context.Context, l *locksmith.Locker, key string, opts ...locksmith.Option) (*locksmith.Lock, error)) {
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := take(ctx, newLocker(t, admin, locksmith.WithPrefix("locksmith:")), key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	l, rec := observed(t, client, locksmith.WithPrefix("locksmith:"))
	got := make(chan obtained, 1)
	go func() {
		lk, err := take(ctx, l, key, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
		got <- obtained{lk: lk, err: err}
	}()
	k, err := l.Keys(key)
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, k.Queue).Val() == 1 }, "the waiter queued")
	require.NoError(t, holder.Release(ctx))
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	ev := rec.waitFor(t, "obtained", kindKey(locksmith.EventObtain, key))
	require.NoError(t, ev.Err)
	require.True(t, ev.HandedOver, "HandedOver of a lock handed over unheard")
	require.GreaterOrEqual(t, ev.Attempts, 2, "the first attempt queued, a later one found the lock handed over")
	_, heard := rec.find(func(e locksmith.Event) bool { return e.Kind == locksmith.EventSubscriber && e.Conn == locksmith.ConnUp })
	require.False(t, heard, "the waiter's user may not subscribe: it heard nothing")
	require.NoError(t, res.lk.Release(ctx))
}

// A subscriber whose connection is killed reports it down, replaced and
// up again; the waiter still gets the lock.
func TestObserverSubscriberDown(t *testing.T) {
	srv := redistest.New(t) // of its own: the test kills its pub/sub clients
	ctx := t.Context()
	key := uniqueKey(t)
	admin := srv.Client(t)
	holder, err := newLocker(t, srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	l, rec := observed(t, srv.Client(t))
	got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	isConn := func(s locksmith.ConnState) func(locksmith.Event) bool {
		return func(e locksmith.Event) bool { return e.Kind == locksmith.EventSubscriber && e.Conn == s }
	}
	rec.waitFor(t, "subscriber up", isConn(locksmith.ConnUp))
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	down := rec.waitFor(t, "subscriber down", isConn(locksmith.ConnDown))
	require.Error(t, down.Err)
	replaced := rec.waitFor(t, "subscriber replaced", isConn(locksmith.ConnReplaced))
	require.Error(t, replaced.Err)
	require.Positive(t, replaced.Attempts)
	eventually(t, 5*time.Second, func() bool {
		n := 0
		for _, e := range rec.all() {
			if isConn(locksmith.ConnUp)(e) {
				n++
			}
		}
		return n >= 2
	}, "subscriber up again: %v", describe(rec))
	require.NoError(t, holder.Release(ctx))
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	require.NoError(t, res.lk.Release(ctx))
}

func TestObserverLease(t *testing.T) {
	srv := redistest.Shared(t)
	t.Run("renewed, then found gone", func(t *testing.T) {
		ctx := t.Context()
		c := srv.Client(t)
		l, rec := observed(t, c)
		key := uniqueKey(t)
		err := l.WithLock(ctx, key, func(ctx context.Context) error {
			rec.waitFor(t, "renewed", kindKey(locksmith.EventRenewal, key))
			require.NoError(t, c.Del(ctx, key).Err())
			<-ctx.Done()
			return nil
		}, locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(20*time.Millisecond))
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		renewed := rec.waitFor(t, "renewed", kindKey(locksmith.EventRenewal, key))
		require.NoError(t, renewed.Err)
		require.Equal(t, locksmith.HoldLock, renewed.Hold)
		failed := rec.waitFor(t, "renewal found the lock gone", func(e locksmith.Event) bool {
			return e.Kind == locksmith.EventRenewal && e.Key == key && e.Err != nil
		})
		require.Equal(t, locksmith.ClassNotHeld, failed.Class)
		lost := rec.waitFor(t, "lease lost", kindKey(locksmith.EventLeaseLost, key))
		require.Equal(t, locksmith.ClassLost, lost.Class)
		require.ErrorIs(t, lost.Err, locksmith.ErrLockLost)
		require.Positive(t, lost.Held)
		rel := rec.waitFor(t, "release", kindKey(locksmith.EventRelease, key))
		require.Equal(t, locksmith.ClassNotHeld, rel.Class)
	})
	t.Run("renewals fail until the validity runs out", func(t *testing.T) {
		ctx := t.Context()
		f := &fault{}
		l, rec := observed(t, newClient(t, srv.Options(), []redis.Hook{f}))
		key := uniqueKey(t)
		lk, err := l.Obtain(ctx, key, locksmith.WithTTL(300*time.Millisecond), locksmith.WithRenewInterval(50*time.Millisecond))
		require.NoError(t, err)
		f.failScripts.Store(true)
		lease := lk.Lease(ctx)
		<-lease.Done()
		failed := rec.waitFor(t, "renewal failed", func(e locksmith.Event) bool {
			return e.Kind == locksmith.EventRenewal && e.Key == key && e.Err != nil
		})
		require.Equal(t, locksmith.ClassRedis, failed.Class)
		lost := rec.waitFor(t, "lease lost", kindKey(locksmith.EventLeaseLost, key))
		require.Equal(t, locksmith.ClassLost, lost.Class)
		require.Equal(t, context.Cause(lease), lost.Err)
		f.failScripts.Store(false)
		// (The key may outlive the local Deadline by the drift
		// allowance: the release may find it or not.)
		_ = lk.Release(ctx)
	})
}

func TestObserverOnce(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	l, rec := observed(t, srv.Client(t))
	onceOf := func(key string, r locksmith.OnceResult) func(locksmith.Event) bool {
		return func(e locksmith.Event) bool { return e.Kind == locksmith.EventOnce && e.Key == key && e.Once == r }
	}
	key := uniqueKey(t)
	errJob := errors.New("job failed")
	_, err := l.Once(ctx, key, func(context.Context) error { return errJob })
	require.ErrorIs(t, err, errJob)
	ran := rec.waitFor(t, "ran, failed", onceOf(key, locksmith.OnceRan))
	require.ErrorIs(t, ran.Err, errJob)
	require.Equal(t, locksmith.ClassFunction, ran.Class, "fn's own error is the function's, not Redis's")
	require.Equal(t, "function-error", ran.Class.String())

	_, err = l.Once(ctx, key, func(context.Context) error { return nil })
	require.NoError(t, err)
	recorded := rec.waitFor(t, "recorded", onceOf(key, locksmith.OnceRecorded))
	require.NoError(t, recorded.Err)
	rel := rec.waitFor(t, "the completing release", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventRelease && e.Key == key && e.Err == nil
	})
	require.Equal(t, locksmith.HoldLock, rel.Hold)

	ranAgain, err := l.Once(ctx, key, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.False(t, ranAgain)
	rec.waitFor(t, "skipped", onceOf(key, locksmith.OnceSkipped))

	other := uniqueKey(t)
	holder, err := newLocker(t, srv.Client(t)).Obtain(ctx, other, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	_, err = l.Once(ctx, other, func(context.Context) error { return nil })
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	notRun := rec.waitFor(t, "not run", onceOf(other, locksmith.OnceNotRun))
	require.Equal(t, locksmith.ClassNotObtained, notRun.Class)
	require.NoError(t, holder.Release(ctx))
}

func TestObserverSemaphoreAndRWMutex(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	l, rec := observed(t, srv.Client(t))
	holdOf := func(k locksmith.EventKind, key string, h locksmith.Hold) func(locksmith.Event) bool {
		return func(e locksmith.Event) bool { return e.Kind == k && e.Key == key && e.Hold == h }
	}

	sem := l.Semaphore(uniqueKey(t), 1)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	_, err = sem.Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.NoError(t, p.Release(ctx))
	rec.waitFor(t, "permit acquired", func(e locksmith.Event) bool {
		return holdOf(locksmith.EventObtain, sem.Key(), locksmith.HoldPermit)(e) && e.Err == nil
	})
	busy := rec.waitFor(t, "permits all held", func(e locksmith.Event) bool {
		return holdOf(locksmith.EventObtain, sem.Key(), locksmith.HoldPermit)(e) && e.Err != nil
	})
	require.Equal(t, locksmith.ClassNotObtained, busy.Class)
	rec.waitFor(t, "permit released", holdOf(locksmith.EventRelease, sem.Key(), locksmith.HoldPermit))
	_, err = l.Semaphore(sem.Key(), 0).Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	rec.waitFor(t, "invalid limit", func(e locksmith.Event) bool {
		return holdOf(locksmith.EventObtain, sem.Key(), locksmith.HoldPermit)(e) && e.Class == locksmith.ClassInvalid
	})

	m := l.RWMutex(uniqueKey(t))
	require.NoError(t, m.WithReadLock(ctx, func(context.Context) error { return nil }))
	require.NoError(t, m.WithWriteLock(ctx, func(context.Context) error { return nil }))
	for _, h := range []locksmith.Hold{locksmith.HoldRead, locksmith.HoldWrite} {
		rec.waitFor(t, h.String()+" obtained", holdOf(locksmith.EventObtain, m.Key(), h))
		rec.waitFor(t, h.String()+" released", holdOf(locksmith.EventRelease, m.Key(), h))
	}
}
