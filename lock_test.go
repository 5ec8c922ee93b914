package locksmith_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestObtainRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		cnt := &counter{}
		l := newLocker(t, b.client(t, cnt), locksmith.WithPrefix("app:"), locksmith.WithTTL(time.Second))
		key := uniqueKey(t)
		warmUp(t, l)
		cnt.reset()

		before := time.Now()
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.Equal(t, 1, cnt.count(), "Obtain must be one request")
		require.Equal(t, key, lk.Key())
		require.Len(t, lk.Token(), 36, "token is a UUID")

		got, err := raw.Get(ctx, "app:"+key).Result()
		require.NoError(t, err)
		require.Equal(t, lk.Token(), got, "the lock lives at prefix+key and holds the token")
		require.Zero(t, raw.Exists(ctx, key).Val(), "nothing at the unprefixed key")

		ttl, err := lk.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, time.Second)

		// The deadline is the TTL less the drift allowance, counted
		// from before the request was sent.
		require.WithinRange(t, lk.Deadline(), before.Add(time.Second-12*time.Millisecond), time.Now().Add(time.Second-12*time.Millisecond))

		n := cnt.count()
		require.NoError(t, lk.Release(ctx))
		require.Equal(t, n+1, cnt.count(), "Release must be one request")
		require.Zero(t, raw.Exists(ctx, "app:"+key).Val())

		n = cnt.count()
		require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld, "second Release")
		require.ErrorIs(t, lk.Refresh(ctx, time.Second), locksmith.ErrNotHeld)
		_, err = lk.TTL(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld)
		require.Equal(t, n, cnt.count(), "a released handle sends nothing")
	})
}

func TestObtainHeldTryOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		holder := newLocker(t, b.client(t))
		lk, err := holder.Obtain(ctx, key)
		require.NoError(t, err)
		defer lk.Release(ctx)

		cnt := &counter{}
		other := newLocker(t, b.client(t, cnt))
		warmUp(t, other)
		cnt.reset()
		_, err = other.Obtain(ctx, key)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		// One attempt: SET NX PX, refused, then a GET of the holder's
		// token, so that a resend of this call's own SET is told from
		// another holder.
		require.Equal(t, []string{"set", "get"}, cnt.all(), "NoRetry tries exactly once")
		require.NoError(t, other.WithLock(ctx, key+":other", func(context.Context) error { return nil }))
	})
}

func TestObtainRetryWinsAfterRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		l := newLocker(t, b.client(t), locksmith.WithTTL(10*time.Second))
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)

		released := make(chan error, 1)
		go func() {
			time.Sleep(30 * time.Millisecond)
			released <- lk.Release(context.Background())
		}()
		waiter, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
		require.NoError(t, <-released, "the holder's Release")
		require.NoError(t, err)
		require.NoError(t, waiter.Release(ctx))
	})
}

// countingStrategy records, per Obtain call, how many retries its strategy
// granted.
type countingStrategy struct {
	s       locksmith.RetryStrategy
	mu      sync.Mutex
	granted []*int
}

func (c *countingStrategy) NewBackoff() locksmith.Backoff {
	n := new(int)
	c.mu.Lock()
	c.granted = append(c.granted, n)
	c.mu.Unlock()
	return &countingBackoff{b: c.s.NewBackoff(), n: n}
}

type countingBackoff struct {
	b locksmith.Backoff
	n *int
}

func (c *countingBackoff) Next() (time.Duration, bool) {
	d, ok := c.b.Next()
	if ok {
		*c.n++
	}
	return d, ok
}

func TestRetryGivesUpAndBudgetsArePerCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		l := newLocker(t, b.client(t))
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		defer lk.Release(ctx)

		// One strategy value shared by every goroutine and call.
		shared := locksmith.LimitRetry(locksmith.LinearBackoff(50*time.Millisecond), 3)
		cs := &countingStrategy{s: shared}
		cnt := &counter{}
		other := newLocker(t, b.client(t, cnt), locksmith.WithRetry(cs))
		warmUp(t, newLocker(t, b.client(t)))
		// The Locker's first call checks the user's permissions: do it
		// now, uncounted.
		require.NoError(t, other.Check(ctx))
		cnt.reset()
		const callers = 8
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := other.Obtain(ctx, key)
				if !errors.Is(err, locksmith.ErrNotObtained) {
					t.Errorf("Obtain = %v, want ErrNotObtained", err)
				}
			}()
		}
		wg.Wait()
		require.Len(t, cs.granted, callers)
		for i, n := range cs.granted {
			require.Equal(t, 3, *n, "call %d got its own budget of 3 retries", i)
		}
		// Nothing was released, so the waiters had nothing to try for.
		// While they start together each may try once (a SET, and a
		// PTTL to learn the holder's TTL) and once more when it joins a
		// queue whose subscription came up meanwhile; the head tries when
		// the subscription is confirmed and at the end of each of its 3
		// slots; and as the callers give up one after the other, each
		// new head may still try at the end of its last slot. Each that
		// was queued for a handoff by its attempt withdraws when it gives
		// up. Waiters that all polled would send 3*callers more.
		// TestPollingDoesNotGrowWithWaiters checks the rate directly.
		require.LessOrEqual(t, cnt.count(), 3*callers+1+3+(callers-1)+callers, "waiters that can only fail must not poll")
	})
}

func TestObtainContextEndsWhileWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		key := uniqueKey(t)
		l := newLocker(t, b.client(t))
		lk, err := l.Obtain(t.Context(), key)
		require.NoError(t, err)
		defer lk.Release(t.Context())

		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err = l.Obtain(ctx, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		// A context that is already done sends nothing.
		cnt := &counter{}
		done, cancel2 := context.WithCancel(t.Context())
		cancel2()
		_, err = newLocker(t, b.client(t, cnt)).Obtain(done, uniqueKey(t))
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, cnt.count())
	})
}

func TestWaiterWakesWhenCrashedHoldersTTLRunsOut(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		raw := b.client(t)
		// A holder that crashed: its key stays until the TTL runs out.
		require.NoError(t, raw.Set(ctx, key, "crashed-holder", 150*time.Millisecond).Err())

		// The backoff alone would make the waiter sleep for an hour; the
		// holder's remaining TTL, reported by the failed attempt, wakes it.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lk, err := newLocker(t, b.client(t)).Obtain(wctx, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	})
}

func TestExpiryThenTakeover(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		raw := b.client(t)
		old, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(100*time.Millisecond))
		require.NoError(t, err)

		b.elapse(t, 150*time.Millisecond)
		_, err = old.TTL(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld, "TTL of an expired lock")

		newer, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)

		require.ErrorIs(t, old.Refresh(ctx, time.Hour), locksmith.ErrNotHeld)
		_, err = old.TTL(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld)
		require.ErrorIs(t, old.Release(ctx), locksmith.ErrNotHeld)

		// The new holder's key is untouched: same token, TTL not
		// extended to an hour by the old handle's Refresh.
		require.Equal(t, newer.Token(), raw.Get(ctx, key).Val())
		ttl, err := newer.TTL(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, ttl, time.Minute)
		require.NoError(t, newer.Release(ctx))
	})
}

func TestRefresh(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		lk, err := newLocker(t, b.client(t)).Obtain(ctx, uniqueKey(t), locksmith.WithTTL(200*time.Millisecond))
		require.NoError(t, err)
		defer lk.Release(ctx)
		first := lk.Deadline()

		b.elapse(t, 100*time.Millisecond)
		require.NoError(t, lk.Refresh(ctx, time.Minute))
		ttl, err := lk.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second)
		require.True(t, lk.Deadline().After(first.Add(50*time.Second)), "Refresh moves the deadline")

		// Still held after the original TTL.
		b.elapse(t, 300*time.Millisecond)
		_, err = lk.TTL(ctx)
		require.NoError(t, err)
	})
}

func TestContentionNoOverlap(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		key := uniqueKey(t)
		// Two Lockers on separate connection pools, as two processes.
		lockers := []*locksmith.Locker{
			newLocker(t, b.client(t), locksmith.WithTTL(5*time.Second)),
			newLocker(t, b.client(t), locksmith.WithTTL(5*time.Second)),
		}
		const perLocker, rounds = 8, 15
		acquired, overlaps := contend(t, ctx, lockers, key, perLocker, rounds, 100*time.Microsecond,
			locksmith.ExponentialBackoff(time.Millisecond, 4*time.Millisecond))
		require.Zero(t, overlaps, "two holders inside the critical section at once")
		require.Equal(t, int64(len(lockers)*perLocker*rounds), acquired)
	})
}

func TestScriptCacheFlushed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithTTL(time.Second))
		flush := func() { require.NoError(t, raw.ScriptFlush(ctx).Err()) }

		flush()
		lk, err := l.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err)
		flush()
		require.NoError(t, lk.Refresh(ctx, 2*time.Second))
		flush()
		_, err = lk.TTL(ctx)
		require.NoError(t, err)
		flush()
		require.NoError(t, lk.Release(ctx))
	})
}

func TestRedisUnreachableIsNotNotObtained(t *testing.T) {
	// A port nothing listens on.
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close()
	c := newClient(t, &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond}, nil)
	l := newLocker(t, c)

	for _, opts := range [][]locksmith.Option{
		nil,
		{locksmith.WithRetry(locksmith.LinearBackoff(time.Millisecond))},
	} {
		_, err := l.Obtain(t.Context(), "down", opts...)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a Redis failure is not 'held elsewhere'")
		require.NotErrorIs(t, err, locksmith.ErrInvalidArgument)

		ran := false
		err = l.WithLock(t.Context(), "down", func(context.Context) error { ran = true; return nil }, opts...)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		require.False(t, ran, "fail closed: fn must not run")
	}
}

func TestRedisDownWhileHeld(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	c := newClient(t, &redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1}, nil)
	l := newLocker(t, c, locksmith.WithTTL(time.Second))
	lk, err := l.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)

	srv.Stop()
	err = lk.Release(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotHeld, "an unanswered Release is not 'not held'")
	err = lk.Refresh(ctx, time.Second)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotHeld)
	_, err = l.Obtain(ctx, uniqueKey(t))
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)

	// Back up, empty: the failed Release left the handle usable, and the
	// lock is gone with the restart.
	require.NoError(t, srv.Start())
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
}

func TestRedisErrorReplyIsNotNotObtained(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		// The key holds a hash, so the script's GET fails with WRONGTYPE.
		require.NoError(t, raw.HSet(ctx, key, "f", "v").Err())
		_, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Millisecond)))
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		var rerr redis.Error
		require.ErrorAs(t, err, &rerr, "the Redis error is wrapped")
	})
}

func TestObtainReplyLostLeavesNoLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		f := &fault{}
		l := newLocker(t, b.client(t, f))
		// The cleanup's reply is lost too; with the script cached (as it
		// is after a first call) the cleanup still runs on the server.
		warmUp(t, l)

		// The acquire lands but its reply is lost, as when ctx is cancelled
		// or the connection drops mid-call: Obtain must clean up.
		f.loseReply.Store(true)
		_, err := l.Obtain(ctx, key)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		f.loseReply.Store(false)
		// The cleanup ran through the same faulty client; check what the
		// server holds now.
		require.Zero(t, raw.Exists(ctx, key).Val(), "no lock left behind")
	})
}

func TestObtainCancelledMidCallLeavesNoLock(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	raw := srv.Client(t)
	key := uniqueKey(t)
	// The server sleeps through the call; the client gives up when ctx
	// ends, after the acquire was sent.
	c := newClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1}, nil)
	l := newLocker(t, c)
	// Load the script first so the call in flight is the acquire itself.
	lk, err := l.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	sleeping := make(chan error, 1)
	go func() { sleeping <- raw.Do(ctx, "DEBUG", "SLEEP", "0.3").Err() }()
	waitAsleep(t, srv)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = l.Obtain(cctx, key)
	// Not obtained because the caller gave up, not because of a holder.
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-sleeping)
	eventually(t, 5*time.Second, func() bool { return raw.Exists(ctx, key).Val() == 0 }, "lock left behind after a cancelled Obtain")
}

func TestObtainReplyAfterValidityIsNotSuccess(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		f := &fault{}
		l := newLocker(t, b.client(t, f))
		warmUp(t, l)
		// The lock lives 2s on the server, but the client counts it valid
		// for 2s - 1.9s = 100ms; the reply arrives after 200ms.
		f.slowReply.Store(int64(200 * time.Millisecond))
		_, err := l.Obtain(ctx, key, locksmith.WithTTL(2*time.Second), locksmith.WithDrift(1900*time.Millisecond))
		f.slowReply.Store(0)
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		require.Zero(t, raw.Exists(ctx, key).Val(), "the late lock was not deleted")
	})
}

func TestResentAcquireIsNotReportedAsHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		f := &fault{}
		l := newLocker(t, b.client(t, f))
		// A client that resends the acquire after losing its reply must
		// not be told that it lost to itself.
		f.resend.Store(true)
		lk, err := l.Obtain(ctx, uniqueKey(t))
		f.resend.Store(false)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	})
}

func TestConcurrentReleaseOfOneHandle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		lk, err := newLocker(t, b.client(t)).Obtain(ctx, key)
		require.NoError(t, err)
		lctx := lk.Lease(ctx)

		var ok, notHeld atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := lk.Release(ctx); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, locksmith.ErrNotHeld):
					notHeld.Add(1)
				default:
					t.Errorf("Release: %v", err)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int64(1), ok.Load())
		require.Equal(t, int64(15), notHeld.Load())
		require.Zero(t, raw.Exists(ctx, key).Val())
		<-lctx.Done()
		require.NotErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	})
}

func TestBadInputSendsNothing(t *testing.T) {
	m := miniredis.RunT(t)
	cnt := &counter{}
	c := newClient(t, &redis.Options{Addr: m.Addr()}, []redis.Hook{cnt})
	ctx := t.Context()
	good := newLocker(t, c)
	fn := func(context.Context) error { return nil }

	cases := []struct {
		name string
		l    *locksmith.Locker
		key  string
		opts []locksmith.Option
	}{
		{"empty key", good, "", nil},
		{"zero TTL", good, "k", []locksmith.Option{locksmith.WithTTL(0)}},
		{"negative TTL", good, "k", []locksmith.Option{locksmith.WithTTL(-time.Second)}},
		{"TTL under 1ms", good, "k", []locksmith.Option{locksmith.WithTTL(999 * time.Microsecond)}},
		{"zero option", good, "k", []locksmith.Option{{}}},
		{"nil retry", good, "k", []locksmith.Option{locksmith.WithRetry(nil)}},
		{"zero linear", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.LinearBackoff(0))}},
		{"negative linear", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.LinearBackoff(-time.Second))}},
		{"exponential min zero", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.ExponentialBackoff(0, time.Second))}},
		{"exponential max below min", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.ExponentialBackoff(time.Second, time.Millisecond))}},
		{"limit of nil", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.LimitRetry(nil, 3))}},
		{"negative limit", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.LimitRetry(locksmith.NoRetry(), -1))}},
		{"limit of bad strategy", good, "k", []locksmith.Option{locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(0), 3))}},
		{"zero renew interval", good, "k", []locksmith.Option{locksmith.WithRenewInterval(0)}},
		{"renew interval not under TTL", good, "k", []locksmith.Option{locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(time.Second)}},
		{"TTL shortened below renew interval", good, "k", []locksmith.Option{locksmith.WithRenewInterval(time.Second), locksmith.WithTTL(500 * time.Millisecond)}},
		{"negative drift", good, "k", []locksmith.Option{locksmith.WithDrift(-time.Millisecond)}},
		{"drift not under TTL", good, "k", []locksmith.Option{locksmith.WithTTL(time.Second), locksmith.WithDrift(time.Second)}},
		{"nil client", newLocker(t, nil), "k", nil},
		{"typed nil client", newLocker(t, (*redis.Client)(nil)), "k", nil},
		{"bad default", newLocker(t, c, locksmith.WithTTL(0)), "k", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.l.Obtain(ctx, tc.key, tc.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.NotErrorIs(t, err, locksmith.ErrNotObtained)
			err = tc.l.WithLock(ctx, tc.key, fn, tc.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.Zero(t, cnt.count(), "bad input must send nothing")
		})
	}

	t.Run("nil fn", func(t *testing.T) {
		require.ErrorIs(t, good.WithLock(ctx, "k", nil), locksmith.ErrInvalidArgument)
		require.Zero(t, cnt.count())
	})
	t.Run("bad refresh TTL", func(t *testing.T) {
		lk, err := good.Obtain(ctx, "k")
		require.NoError(t, err)
		n := cnt.count()
		for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond} {
			require.ErrorIs(t, lk.Refresh(ctx, ttl), locksmith.ErrInvalidArgument)
		}
		require.Equal(t, n, cnt.count())
		// An explicit drift allowance must stay under the refreshed TTL.
		lk2, err := good.Obtain(ctx, "k2", locksmith.WithDrift(50*time.Millisecond))
		require.NoError(t, err)
		n = cnt.count()
		require.ErrorIs(t, lk2.Refresh(ctx, 50*time.Millisecond), locksmith.ErrInvalidArgument)
		require.Equal(t, n, cnt.count())
		require.NoError(t, lk.Release(ctx))
		require.NoError(t, lk2.Release(ctx))
	})
}

func TestTTLTruncatedToMilliseconds(t *testing.T) {
	m := miniredis.RunT(t)
	c := newClient(t, &redis.Options{Addr: m.Addr()}, nil)
	lk, err := newLocker(t, c).Obtain(t.Context(), "k", locksmith.WithTTL(1500*time.Microsecond+time.Second))
	require.NoError(t, err)
	require.Equal(t, 1001*time.Millisecond, m.TTL("k"))
	require.NoError(t, lk.Release(t.Context()))
}

// TestFailedWaiterCleansUpOnce: when a waiter's attempt fails in a way that
// may have landed, Obtain deletes its token and withdraws its entry once,
// not a second time as it leaves the queue (which against an unreachable
// Redis would double the time it takes to return).
func TestFailedWaiterCleansUpOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		holder := newLocker(t, b.client(t))
		lk, err := holder.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		defer lk.Release(ctx)

		cnt, f := &counter{}, &fault{}
		raw := b.client(t)
		w := newLocker(t, b.client(t, cnt, f), locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		got := make(chan error, 1)
		go func() {
			_, err := w.Obtain(ctx, key)
			got <- err
		}()
		eventually(t, 5*time.Second, func() bool { return raw.Exists(ctx, plainNames(key).Queue).Val() == 1 }, "the waiter queued")
		cnt.reset()
		f.failScripts.Store(true)
		err = <-got
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		scripts := 0
		for _, name := range cnt.all() {
			if name == "evalsha" || name == "eval" {
				scripts++
			}
		}
		require.Equal(t, 2, scripts, "the failed attempt and one cleanup: %v", cnt.all())
	})
}
