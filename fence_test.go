package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestFencesIncrease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		lockers := []*locksmith.Locker{
			newLocker(t, b.client(t), locksmith.WithFencing()),
			newLocker(t, b.client(t), locksmith.WithFencing()),
		}
		var last int64
		for i := range 20 {
			lk, err := lockers[i%2].Obtain(ctx, key)
			require.NoError(t, err)
			require.Greater(t, lk.Fence(), last, "fence %d did not increase", i)
			last = lk.Fence()
			require.NoError(t, lk.Release(ctx))
		}
		// The counter shares the lock's slot and never expires.
		counter := names(t, "", key).Fence
		require.Equal(t, time.Duration(-1), raw.TTL(ctx, counter).Val())

		// Without fencing, no token and no counter.
		plain := uniqueKey(t)
		lk, err := newLocker(t, b.client(t)).Obtain(ctx, plain)
		require.NoError(t, err)
		require.Zero(t, lk.Fence())
		require.Zero(t, raw.Exists(ctx, names(t, "", plain).Fence).Val())
		require.NoError(t, lk.Release(ctx))

		// A per-call option turns it on.
		lk, err = newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithFencing())
		require.NoError(t, err)
		require.Greater(t, lk.Fence(), last)
		require.NoError(t, lk.Release(ctx))
	})
}

func TestFencesIncreaseAfterCounterLoss(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	key := uniqueKey(t)
	l := newLocker(t, srv.Client(t), locksmith.WithFencing())
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	old := lk.Fence()

	// Redis restarts empty while the lock is held: the counter is gone,
	// yet the next holder's fence is above the old one's, so a resource
	// that saw the old holder's writes accepts the new holder's and
	// rejects the old holder's from then on.
	require.NoError(t, srv.Restart())
	next, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	require.Greater(t, next.Fence(), old)
	require.NoError(t, next.Release(ctx))
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
}

func TestResentFencedAcquireKeepsItsFence(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		f := &fault{}
		l := newLocker(t, b.client(t, f), locksmith.WithFencing())
		f.resend.Store(true)
		lk, err := l.Obtain(ctx, key)
		f.resend.Store(false)
		require.NoError(t, err)
		counter, err := raw.Get(ctx, names(t, "", key).Fence).Int64()
		require.NoError(t, err)
		require.Equal(t, counter, lk.Fence(), "the resend must report the fence the first delivery took")
		require.NoError(t, lk.Release(ctx))
	})
}

func TestFenceReachableFromWithLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		l := newLocker(t, b.client(t), locksmith.WithFencing())
		var fence int64
		require.NoError(t, l.WithLock(t.Context(), uniqueKey(t), func(ctx context.Context) error {
			fence = locksmith.LockFromContext(ctx).Fence()
			return nil
		}))
		require.Positive(t, fence)
	})
}

// TestFenceTTL checks that WithFenceTTL gives the counter a TTL, on the
// acquire and on a handoff, and that tokens keep increasing once it has
// expired.
func TestFenceTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		counter := names(t, "", key).Fence
		l := newLocker(t, b.client(t), locksmith.WithFencing(), locksmith.WithFenceTTL(time.Hour))
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		ttl := raw.PTTL(ctx, counter).Val()
		require.Greater(t, ttl, 59*time.Minute, "the counter's TTL after an acquire")

		// A waiter of another Locker is handed the lock, and its token
		// renews the counter's TTL.
		require.NoError(t, raw.PExpire(ctx, counter, time.Minute).Err())
		w := newLocker(t, b.client(t), locksmith.WithFencing(), locksmith.WithFenceTTL(time.Hour))
		got := obtainInBackground(ctx, w, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		waitQueued(t, raw, key, 1)
		require.NoError(t, lk.Release(ctx))
		res := receive(t, got, "fenced waiter")
		require.NoError(t, res.err)
		require.Greater(t, res.lk.Fence(), lk.Fence())
		require.Greater(t, raw.PTTL(ctx, counter).Val(), 59*time.Minute, "the counter's TTL after a handoff")
		require.NoError(t, res.lk.Release(ctx))

		// The counter expires; the next token is still larger.
		require.NoError(t, raw.Del(ctx, counter).Err())
		next, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.Greater(t, next.Fence(), res.lk.Fence())
		require.NoError(t, next.Release(ctx))

		_, err = l.Obtain(ctx, key, locksmith.WithFenceTTL(0))
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	})
}
