//go:build unix

package locksmith_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// freeze stops srv's process (SIGSTOP), so that it accepts connections
// and requests but answers nothing, until t ends.
func freeze(t *testing.T, srv *redistest.Server) {
	t.Helper()
	pid := srv.Pid()
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// TestReturnsPromptlyAfterLossWhenRedisHangs checks that WithLock and
// Once, whose function returns when its lease ends, return within the
// release's bound after a loss (1s, see WithLock) although Redis answers
// nothing, and report the failed release besides the loss. They used to
// give the release the whole TTL (3s here) and drop its error.
func TestReturnsPromptlyAfterLossWhenRedisHangs(t *testing.T) {
	const ttl = 3 * time.Second
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, l *locksmith.Locker, key string, fn func(context.Context) error) error
	}{
		{"WithLock", func(t *testing.T, l *locksmith.Locker, key string, fn func(context.Context) error) error {
			return l.WithLock(t.Context(), key, fn)
		}},
		{"Once", func(t *testing.T, l *locksmith.Locker, key string, fn func(context.Context) error) error {
			ran, err := l.Once(t.Context(), key, fn)
			require.True(t, ran)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.New(t)
			opt := srv.Options()
			opt.ContextTimeoutEnabled = true
			l := newLocker(t, newClient(t, opt, nil), locksmith.WithTTL(ttl))
			var lostAt time.Time
			err := tc.run(t, l, uniqueKey(t), func(ctx context.Context) error {
				freeze(t, srv)
				<-ctx.Done()
				lostAt = time.Now()
				return nil
			})
			took := time.Since(lostAt)
			t.Logf("returned %v after the loss: %v", took, err)
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			require.Contains(t, err.Error(), "ran out before a renewal succeeded", "the loss is not reported")
			require.Contains(t, err.Error(), "locksmith: release", "the failed release is not reported")
			require.ErrorIs(t, err, context.DeadlineExceeded, "the release did not end on its deadline")
			require.Less(t, took, 2*time.Second, "returned too long after the loss")
		})
	}
}

// TestReleaseEndsSoonAfterDeadlineWhenRedisHangs checks the release that
// starts while the lock is still valid but Redis answers nothing: it gives
// up 1s past the lock's Deadline, not after the whole TTL.
func TestReleaseEndsSoonAfterDeadlineWhenRedisHangs(t *testing.T) {
	const ttl = 3 * time.Second
	srv := redistest.New(t)
	opt := srv.Options()
	opt.ContextTimeoutEnabled = true
	l := newLocker(t, newClient(t, opt, nil), locksmith.WithTTL(ttl))
	var deadline time.Time
	err := l.WithLock(t.Context(), uniqueKey(t), func(ctx context.Context) error {
		deadline = locksmith.LockFromContext(ctx).Deadline()
		freeze(t, srv)
		// Return, unaware of any trouble, shortly before the Deadline.
		eventually(t, ttl, func() bool { return time.Until(deadline) < 300*time.Millisecond }, "the Deadline did not approach")
		return nil
	})
	past := time.Since(deadline)
	t.Logf("returned %v past the Deadline: %v", past, err)
	require.ErrorIs(t, err, locksmith.ErrLockLost)
	require.Contains(t, err.Error(), "locksmith: release", "the failed release is not reported")
	require.Less(t, past, 2*time.Second, "the release outlasted the Deadline by too much")
}

// TestQuorumWaitsBoundedForAFrozenMaster checks NewQuorum's promise that
// an attempt waits for each master at most a tenth of the TTL: with one
// of three masters frozen, Obtain takes the lock from the other two in
// about that time. (The first call of a Locker also checks its
// permissions, waiting up to 500ms for each master; the locks are left to
// expire: a release waits up to 5s for the frozen master.)
func TestQuorumWaitsBoundedForAFrozenMaster(t *testing.T) {
	const ttl = time.Second // a master is waited for at most 100ms
	var clients []redis.UniversalClient
	var frozen *redistest.Server
	for i := range 3 {
		srv := redistest.New(t)
		opt := srv.Options()
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		clients = append(clients, newClient(t, opt, nil))
		if i == 1 {
			frozen = srv
		}
	}
	l := newQuorumLocker(t, clients, locksmith.WithTTL(ttl))
	freeze(t, frozen)
	_, err := l.Obtain(t.Context(), uniqueKey(t))
	require.NoError(t, err)
	for range 3 {
		start := time.Now()
		_, err := l.Obtain(t.Context(), uniqueKey(t))
		took := time.Since(start)
		require.NoError(t, err)
		require.GreaterOrEqual(t, took, ttl/10, "Obtain did not wait for the frozen master")
		require.Less(t, took, 400*time.Millisecond, "Obtain waited too long for the frozen master")
	}
}

// TestLeaseEndsByDeadlineWhileReleaseHangs: a Release that hangs (the
// server frozen before the lease's first renewal) stops the renewal, yet
// the lease still ends at the Deadline, lost, while the Release is still
// waiting for Redis; not when the Release gives up.
func TestLeaseEndsByDeadlineWhileReleaseHangs(t *testing.T) {
	srv := redistest.New(t)
	opt := srv.Options()
	opt.ContextTimeoutEnabled = true
	ctx := t.Context()
	lk, err := newLocker(t, newClient(t, opt, nil)).Obtain(ctx, uniqueKey(t),
		locksmith.WithTTL(600*time.Millisecond), locksmith.WithRenewInterval(200*time.Millisecond))
	require.NoError(t, err)
	lctx := lk.Lease(ctx)
	at := doneAt(lctx)
	freeze(t, srv)
	released := make(chan error, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // (a test that failed early still waits for it)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		released <- lk.Release(rctx)
	}()

	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	require.WithinDuration(t, lk.Deadline(), at(), 250*time.Millisecond)
	require.False(t, at().Before(lk.Deadline().Add(-100*time.Millisecond)), "lease ended long before its deadline")
	select {
	case err := <-released:
		t.Fatalf("the Release returned before the lease ended: %v", err)
	default:
	}
	require.ErrorIs(t, <-released, context.DeadlineExceeded)
}
