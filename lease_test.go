package locksmith_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// doneAt returns a function that waits for ctx to be done and reports
// when that happened.
func doneAt(ctx context.Context) func() time.Time {
	var at time.Time
	recorded := make(chan struct{})
	context.AfterFunc(ctx, func() {
		at = time.Now()
		close(recorded)
	})
	return func() time.Time {
		<-recorded
		return at
	}
}

func TestLeaseKeepsLockPastManyTTLs(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		const ttl = 100 * time.Millisecond
		lk, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(ttl))
		require.NoError(t, err)
		lctx := lk.Lease(ctx)
		require.Same(t, lk, locksmith.LockFromContext(lctx))

		time.Sleep(5*ttl + ttl/2)
		require.NoError(t, lctx.Err(), "lease ended while the lock was held")
		require.Equal(t, lk.Token(), raw.Get(ctx, key).Val(), "lock expired despite the lease")
		require.True(t, lk.Deadline().After(time.Now()), "renewals move the deadline")

		require.NoError(t, lk.Release(ctx))
		<-lctx.Done()
		require.ErrorIs(t, context.Cause(lctx), context.Canceled, "released, not lost")
		require.NotErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
		require.Zero(t, raw.Exists(ctx, key).Val())

		// A lease on a released lock is over from the start.
		require.Error(t, lk.Lease(ctx).Err())
	})
}

func TestLeaseDetectsLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, how := range []string{"deleted", "taken"} {
			t.Run(how, func(t *testing.T) {
				ctx := t.Context()
				raw := b.client(t)
				key := uniqueKey(t)
				lk, err := newLocker(t, b.client(t)).Obtain(ctx, key,
					locksmith.WithTTL(10*time.Second), locksmith.WithRenewInterval(20*time.Millisecond))
				require.NoError(t, err)
				lctx := lk.Lease(ctx)
				second := lk.Lease(ctx)

				if how == "deleted" {
					require.NoError(t, raw.Del(ctx, key).Err())
				} else {
					require.NoError(t, raw.Set(ctx, key, "intruder", time.Minute).Err())
				}
				select {
				case <-lctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("lease did not notice the lock was gone")
				}
				require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
				<-second.Done()
				require.ErrorIs(t, context.Cause(second), locksmith.ErrLockLost, "every lease context learns of the loss")
				require.ErrorIs(t, lk.Lease(ctx).Err(), context.Canceled)
				require.ErrorIs(t, context.Cause(lk.Lease(ctx)), locksmith.ErrLockLost)

				require.ErrorIs(t, lk.Refresh(ctx, time.Second), locksmith.ErrNotHeld)
				require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
				if how == "taken" {
					require.Equal(t, "intruder", raw.Get(ctx, key).Val(), "the new holder's key is untouched")
				}
			})
		}
	})
}

func TestLeaseEndsByDeadlineWhenRenewalsFail(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		f := &fault{}
		lk, err := newLocker(t, b.client(t, f)).Obtain(ctx, uniqueKey(t),
			locksmith.WithTTL(300*time.Millisecond), locksmith.WithRenewInterval(50*time.Millisecond))
		require.NoError(t, err)
		lctx := lk.Lease(ctx)
		at := doneAt(lctx)
		f.failScripts.Store(true)

		<-lctx.Done()
		cause := context.Cause(lctx)
		require.ErrorIs(t, cause, locksmith.ErrLockLost)
		require.ErrorContains(t, cause, "injected fault", "the cause names the last renewal error")
		// The watchdog fires at the deadline; allow for scheduling only.
		require.WithinDuration(t, lk.Deadline(), at(), 250*time.Millisecond)
		// Not at the first failed renewal, 50ms in: only as the validity
		// runs out (the watchdog fires a hair early, never late by design).
		require.False(t, at().Before(lk.Deadline().Add(-100*time.Millisecond)), "lease ended long before its deadline")
		f.failScripts.Store(false)
		_ = lk.Release(ctx)
	})
}

func TestLeaseEndsByDeadlineWhenRedisHangs(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	raw := srv.Client(t)
	lk, err := newLocker(t, srv.Client(t)).Obtain(ctx, uniqueKey(t),
		locksmith.WithTTL(300*time.Millisecond), locksmith.WithRenewInterval(50*time.Millisecond))
	require.NoError(t, err)
	lctx := lk.Lease(ctx)
	at := doneAt(lctx)

	// The server stops answering anyone for longer than the TTL; the
	// renewal in flight hangs, yet the lease must end at the deadline.
	require.NoError(t, raw.Do(ctx, "DEBUG", "SLEEP", "1").Err())
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	require.WithinDuration(t, lk.Deadline(), at(), 250*time.Millisecond)
	require.False(t, at().Before(lk.Deadline().Add(-100*time.Millisecond)), "lease ended long before its deadline")
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
}

func TestLeaseSurvivesTransientErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		f := &fault{}
		key := uniqueKey(t)
		lk, err := newLocker(t, b.client(t, f)).Obtain(ctx, key,
			locksmith.WithTTL(2*time.Second), locksmith.WithRenewInterval(30*time.Millisecond))
		require.NoError(t, err)
		lctx := lk.Lease(ctx)

		// Renewals fail for a while, well within the validity.
		f.failScripts.Store(true)
		time.Sleep(200 * time.Millisecond)
		f.failScripts.Store(false)
		before := lk.Deadline()
		eventually(t, 5*time.Second, func() bool { return lk.Deadline().After(before) }, "renewal did not resume")
		require.NoError(t, lctx.Err())
		require.Equal(t, lk.Token(), raw.Get(ctx, key).Val())
		require.NoError(t, lk.Release(ctx))
	})
}

func TestLeaseRenewalStops(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const interval = 10 * time.Millisecond
		settled := func(t *testing.T, cnt *counter) {
			t.Helper()
			n := cnt.count()
			time.Sleep(10 * interval)
			require.Equal(t, n, cnt.count(), "renewal still sending after it should have stopped")
		}
		t.Run("on release", func(t *testing.T) {
			ctx := t.Context()
			cnt := &counter{}
			lk, err := newLocker(t, b.client(t, cnt)).Obtain(ctx, uniqueKey(t), locksmith.WithRenewInterval(interval))
			require.NoError(t, err)
			lk.Lease(ctx)
			eventually(t, 5*time.Second, func() bool { return cnt.count() > 3 }, "no renewals")
			require.NoError(t, lk.Release(ctx))
			settled(t, cnt)
		})
		t.Run("when its context ends", func(t *testing.T) {
			cnt := &counter{}
			raw := b.client(t)
			key := uniqueKey(t)
			lk, err := newLocker(t, b.client(t, cnt)).Obtain(t.Context(), key, locksmith.WithRenewInterval(interval))
			require.NoError(t, err)
			errStop := errors.New("caller stopped")
			ctx, cancel := context.WithCancelCause(t.Context())
			lctx := lk.Lease(ctx)
			eventually(t, 5*time.Second, func() bool { return cnt.count() > 3 }, "no renewals")
			cancel(errStop)
			<-lctx.Done()
			require.ErrorIs(t, context.Cause(lctx), errStop)
			settled(t, cnt)
			// The lock itself is still held until its TTL, and a new
			// lease renews it again.
			require.Equal(t, lk.Token(), raw.Get(t.Context(), key).Val())
			n := cnt.count()
			lk.Lease(t.Context())
			eventually(t, 5*time.Second, func() bool { return cnt.count() > n+2 }, "a new lease did not renew")
			require.NoError(t, lk.Release(t.Context()))
			settled(t, cnt)
		})
	})
}

func TestLeasesShareOneRenewal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		cnt := &counter{}
		const interval = 20 * time.Millisecond
		lk, err := newLocker(t, b.client(t, cnt)).Obtain(ctx, uniqueKey(t), locksmith.WithRenewInterval(interval))
		require.NoError(t, err)
		start := time.Now()
		n := cnt.count()
		for range 4 {
			lk.Lease(ctx)
		}
		time.Sleep(20 * interval)
		require.NoError(t, lk.Release(ctx))
		elapsed := time.Since(start)
		renewals := cnt.count() - n - 1
		// One renewal loop sends at most one refresh per interval; four
		// would send about four times as many.
		require.LessOrEqual(t, renewals, int(elapsed/interval)+2)
	})
}

func TestFailedReleaseKeepsRenewing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		f := &fault{}
		key := uniqueKey(t)
		lk, err := newLocker(t, b.client(t, f)).Obtain(ctx, key,
			locksmith.WithTTL(300*time.Millisecond), locksmith.WithRenewInterval(30*time.Millisecond))
		require.NoError(t, err)
		lctx := lk.Lease(ctx)

		f.failScripts.Store(true)
		err = lk.Release(ctx)
		f.failScripts.Store(false)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotHeld)

		// The lock is still held and still renewed past its TTL.
		time.Sleep(600 * time.Millisecond)
		require.NoError(t, lctx.Err())
		require.Equal(t, lk.Token(), raw.Get(ctx, key).Val())
		require.NoError(t, lk.Release(ctx))
	})
}

var errJob = errors.New("job failed")

func TestWithLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithPrefix("wl:"))
		key := uniqueKey(t)
		require.Nil(t, locksmith.LockFromContext(ctx))

		ran := false
		err := l.WithLock(ctx, key, func(ctx context.Context) error {
			ran = true
			lk := locksmith.LockFromContext(ctx)
			require.NotNil(t, lk)
			require.Equal(t, key, lk.Key())
			require.Equal(t, lk.Token(), raw.Get(ctx, "wl:"+key).Val())
			// Held: another caller is refused, without waiting.
			_, err := l.Obtain(ctx, key)
			require.ErrorIs(t, err, locksmith.ErrNotObtained)
			return errJob
		})
		require.True(t, ran)
		require.ErrorIs(t, err, errJob, "fn's error is returned")
		require.NotErrorIs(t, err, locksmith.ErrLockLost)
		require.Zero(t, raw.Exists(ctx, "wl:"+key).Val(), "released after fn")

		require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
	})
}

func TestWithLockNotObtainedRunsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		l := newLocker(t, b.client(t))
		key := uniqueKey(t)
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		defer lk.Release(ctx)
		err = l.WithLock(ctx, key, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
	})
}

func TestWithLockReleasesOnPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		l := newLocker(t, b.client(t))
		type boom struct{}
		func() {
			defer func() {
				require.Equal(t, boom{}, recover(), "the panic goes on after the release")
			}()
			_ = l.WithLock(ctx, key, func(context.Context) error { panic(boom{}) })
			t.Error("WithLock returned instead of panicking")
		}()
		require.Zero(t, raw.Exists(ctx, key).Val(), "not released on panic")
	})
}

func TestWithLockReleasesAfterCallerCancels(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		raw := b.client(t)
		key := uniqueKey(t)
		l := newLocker(t, b.client(t))
		ctx, cancel := context.WithCancel(t.Context())
		err := l.WithLock(ctx, key, func(ctx context.Context) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, locksmith.ErrLockLost)
		require.Zero(t, raw.Exists(t.Context(), key).Val(), "the release must not be aborted by the caller's cancellation")
	})
}

func TestWithLockReportsLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("lease noticed", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t), locksmith.WithRenewInterval(10*time.Millisecond))
			err := l.WithLock(ctx, key, func(ctx context.Context) error {
				require.NoError(t, raw.Del(ctx, key).Err())
				<-ctx.Done()
				return nil // fn ignores the loss; WithLock must not
			})
			require.ErrorIs(t, err, locksmith.ErrLockLost)
		})
		t.Run("found at release", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t))
			err := l.WithLock(ctx, key, func(ctx context.Context) error {
				// Gone before the first renewal could notice.
				return raw.Del(ctx, key).Err()
			})
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			require.ErrorIs(t, err, locksmith.ErrNotHeld)
		})
		t.Run("fn returns the cause", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t), locksmith.WithRenewInterval(10*time.Millisecond))
			err := l.WithLock(ctx, key, func(ctx context.Context) error {
				require.NoError(t, raw.Del(ctx, key).Err())
				<-ctx.Done()
				return context.Cause(ctx)
			})
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			require.Equal(t, 1, strings.Count(err.Error(), "lock lost"), "the loss is reported once: %v", err)
		})
	})
}

func TestLeaseFollowsShorterRefresh(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("renews on the new schedule", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			lk, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(3*time.Second))
			require.NoError(t, err)
			lctx := lk.Lease(ctx)
			require.NoError(t, lk.Refresh(ctx, 300*time.Millisecond))
			// Past the new TTL, well before the first renewal of the old
			// schedule (at 1s).
			time.Sleep(700 * time.Millisecond)
			require.NoError(t, lctx.Err())
			require.Equal(t, lk.Token(), raw.Get(ctx, key).Val(), "the lock expired on the new TTL")
			require.NoError(t, lk.Release(ctx))
		})
		t.Run("ends by the new deadline", func(t *testing.T) {
			ctx := t.Context()
			f := &fault{}
			lk, err := newLocker(t, b.client(t, f)).Obtain(ctx, uniqueKey(t), locksmith.WithTTL(5*time.Second))
			require.NoError(t, err)
			lctx := lk.Lease(ctx)
			at := doneAt(lctx)
			require.NoError(t, lk.Refresh(ctx, 300*time.Millisecond))
			f.failScripts.Store(true)
			<-lctx.Done()
			require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
			require.WithinDuration(t, lk.Deadline(), at(), 250*time.Millisecond)
			f.failScripts.Store(false)
			_ = lk.Release(ctx)
		})
		t.Run("rejects a TTL under the renew interval", func(t *testing.T) {
			ctx := t.Context()
			lk, err := newLocker(t, b.client(t)).Obtain(ctx, uniqueKey(t),
				locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(200*time.Millisecond))
			require.NoError(t, err)
			require.ErrorIs(t, lk.Refresh(ctx, 200*time.Millisecond), locksmith.ErrInvalidArgument)
			require.NoError(t, lk.Release(ctx))
		})
	})
}
