package locksmith_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// An observer that panics on every event: locking goes on, the panics
// are counted, and every event is still offered to it.
func TestObserverPanics(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	var calls atomic.Int64
	l := newLocker(t, srv.Client(t), locksmith.WithObserver(locksmith.ObserverFunc(func(locksmith.Event) {
		calls.Add(1)
		panic("observer bug")
	})))
	key := uniqueKey(t)
	for range 5 {
		require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
	}
	// Five obtains and five releases.
	eventually(t, 5*time.Second, func() bool { return l.ObserverStats().Delivered >= 10 }, "10 events delivered: %+v", l.ObserverStats())
	st := l.ObserverStats()
	require.Equal(t, st.Delivered, st.Panicked)
	require.Equal(t, int64(st.Delivered), calls.Load())
	require.Zero(t, st.Dropped)
}

// An observer that blocks: a lease keeps renewing its lock, a waiter is
// handed the lock by a release, and the events that do not fit in the
// buffer are dropped and counted, then reported once the observer
// catches up.
func TestObserverBlocks(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	unblock := make(chan struct{})
	blocked := make(chan struct{}, 1)
	rec := &recorder{}
	l := locksmith.NewObservedBuffer(srv.Client(t), locksmith.ObserverFunc(func(e locksmith.Event) {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-unblock
		rec.Observe(e)
	}), 4)
	t.Cleanup(func() { _ = l.Close() })
	released := false
	release := func() {
		if !released {
			released = true
			close(unblock)
		}
	}
	// Unblocked before the Locker is closed (cleanups run last first).
	t.Cleanup(release)

	key := uniqueKey(t)
	const ttl = 300 * time.Millisecond
	lk, err := l.Obtain(ctx, key, locksmith.WithTTL(ttl), locksmith.WithRenewInterval(20*time.Millisecond))
	require.NoError(t, err)
	<-blocked // the observer is stuck in its first event
	lease := lk.Lease(ctx)

	// The lease renews the lock well past its first TTL.
	first := lk.Deadline()
	eventually(t, 5*time.Second, func() bool { return lk.Deadline().After(first.Add(3 * ttl)) },
		"the lease renewed past 3 TTLs; deadline moved by %v", lk.Deadline().Sub(first))
	require.NoError(t, lease.Err())

	// A waiter of the same Locker is handed the lock by the release.
	got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
	eventually(t, 5*time.Second, func() bool { return locksmith.QueuedWaiters(l, plainNames(key).Channel) == 1 }, "the waiter queued")
	require.NoError(t, lk.Release(ctx))
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	require.NoError(t, res.lk.Release(ctx))

	st := l.ObserverStats()
	require.Positive(t, st.Dropped, "nothing dropped: %+v", st)
	require.Zero(t, st.Delivered, "delivered while blocked: %+v", st)

	release()
	eventually(t, 5*time.Second, func() bool { return l.ObserverStats().Delivered >= 5 }, "the buffered events delivered: %+v", l.ObserverStats())
	// The next event after the drops reports them.
	require.NoError(t, l.WithLock(ctx, uniqueKey(t), func(context.Context) error { return nil }))
	rec.waitFor(t, "a report of the drops", func(e locksmith.Event) bool { return e.Dropped > 0 })
}

// Close delivers the events already buffered, waits for the observer,
// and drops (and counts) the events that come after it.
func TestObserverClose(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	gate := make(chan struct{})
	rec := &recorder{}
	l := locksmith.New(srv.Client(t), locksmith.WithObserver(locksmith.ObserverFunc(func(e locksmith.Event) {
		<-gate
		rec.Observe(e)
	})))
	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	_, err = l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	close(gate)
	<-closed
	require.Len(t, rec.all(), 2, "the events buffered before Close: %v", describe(rec))

	// The lock outlives the Locker; its release is no longer observed.
	require.NoError(t, lk.Release(ctx))
	require.Len(t, rec.all(), 2)
	require.Equal(t, locksmith.ObserverStats{Delivered: 2, Dropped: 1}, l.ObserverStats())
	require.NoError(t, l.Close(), "a second Close")

	// A Locker with an observer that never had an event starts nothing.
	require.NoError(t, locksmith.New(srv.Client(t), locksmith.WithObserver(&recorder{})).Close())
	// Without an observer there are no stats.
	require.Zero(t, newLocker(t, srv.Client(t)).ObserverStats())
}
