package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A lease renews its lock until WithMaxHold's cap, then stops: its
// context ends with ErrMaxHold (which matches ErrLockLost) while the lock
// is still held, and the lock then expires with its TTL, never renewed
// again, unless released.
func TestLeaseStopsRenewingAtMaxHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		var calls counter
		key := uniqueKey(t)
		// Renewed every TTL/3: at the cap the key has at least two thirds
		// of its TTL left, room for a loaded machine to read it.
		const ttl, maxHold = 900 * time.Millisecond, 2 * time.Second
		l := newLocker(t, b.client(t, &calls))
		before := time.Now()
		lk, err := l.Obtain(ctx, key, locksmith.WithTTL(ttl), locksmith.WithMaxHold(maxHold))
		require.NoError(t, err)
		require.False(t, lk.Deadline().After(before.Add(maxHold)), "the Deadline is before the cap")
		lctx := lk.Lease(ctx)

		select {
		case <-lctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the lease did not end at the cap")
		}
		capped := time.Now()
		require.ErrorIs(t, context.Cause(lctx), locksmith.ErrMaxHold)
		require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost, "ErrMaxHold matches ErrLockLost")
		require.False(t, capped.Before(before.Add(maxHold)), "ended %v after the obtain, before the cap", capped.Sub(before))
		// Still held when the lease ended: the lease renewed it past its
		// first TTL, and the cap came before it could expire.
		require.Equal(t, lk.Token(), raw.Get(ctx, key).Val(), "the lock was not held at the cap")
		require.False(t, lk.Deadline().After(capped), "the Deadline is not after the cap")
		renewals := calls.count()

		// Nothing renews it any more: a Refresh is refused without a
		// command, and the key expires with its TTL.
		require.ErrorIs(t, lk.Refresh(ctx, time.Minute), locksmith.ErrMaxHold)
		require.ErrorIs(t, lk.Refresh(ctx, time.Minute), locksmith.ErrNotHeld)
		eventually(t, 10*time.Second, func() bool {
			if b.name == "miniredis" {
				b.elapse(t, ttl/10) // its keys expire as its clock is moved
			}
			return raw.Exists(ctx, key).Val() == 0
		}, "the capped lock did not expire")
		require.Equal(t, renewals, calls.count(), "commands were sent after the cap: %v", calls.all())
		require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
	})
}

// WithLock's function sees its context end at the cap; WithLock releases
// the lock at once when the function returns, and reports ErrMaxHold.
// Once does the same and records nothing.
func TestWithLockAndOnceAtMaxHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithTTL(time.Minute), locksmith.WithMaxHold(200*time.Millisecond))

		key := uniqueKey(t)
		err := l.WithLock(ctx, key, func(lctx context.Context) error {
			<-lctx.Done()
			require.Equal(t, locksmith.LockFromContext(lctx).Token(), raw.Get(ctx, key).Val(), "held at the cap")
			return context.Cause(lctx)
		})
		require.ErrorIs(t, err, locksmith.ErrMaxHold)
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		require.Zero(t, raw.Exists(ctx, key).Val(), "WithLock left the capped lock to its TTL of a minute")

		key = uniqueKey(t)
		ran, err := l.Once(ctx, key, func(ctx context.Context) error {
			<-ctx.Done()
			return nil // the work ignores why it ended: Once must not
		})
		require.True(t, ran)
		require.ErrorIs(t, err, locksmith.ErrMaxHold)
		_, done, err := l.Completed(ctx, key)
		require.NoError(t, err)
		require.False(t, done, "Once recorded a run cut off at the cap")
		require.Zero(t, raw.Exists(ctx, key).Val(), "Once left the capped lock")

		// A permit of a semaphore is capped alike.
		p, err := l.Semaphore(uniqueKey(t), 2).Acquire(ctx)
		require.NoError(t, err)
		lctx := p.Lease(ctx)
		<-lctx.Done()
		require.ErrorIs(t, context.Cause(lctx), locksmith.ErrMaxHold)
		require.NoError(t, p.Release(ctx), "the capped permit was still held")

		// Zero undoes the Locker's cap: the lease renews past it.
		start := time.Now()
		lk, err := l.Obtain(ctx, uniqueKey(t), locksmith.WithMaxHold(0), locksmith.WithTTL(100*time.Millisecond))
		require.NoError(t, err)
		lctx = lk.Lease(ctx)
		eventually(t, 10*time.Second, func() bool { return lk.Deadline().After(start.Add(400 * time.Millisecond)) },
			"the lease did not renew past the Locker's cap")
		require.NoError(t, lctx.Err(), "a lock without a cap was capped")
		require.NoError(t, lk.Release(ctx))
	})
}

// A negative cap is refused before anything is sent.
func TestMaxHoldRefusesNegative(t *testing.T) {
	var calls counter
	l := newLocker(t, newClient(t, redistest.Shared(t).Options(), []redis.Hook{&calls}))
	_, err := l.Obtain(t.Context(), uniqueKey(t), locksmith.WithMaxHold(-time.Second))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	err = l.WithLock(t.Context(), uniqueKey(t), func(context.Context) error { return nil }, locksmith.WithMaxHold(-1))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.Zero(t, calls.count(), "sent %v", calls.all())
}
