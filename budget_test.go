package locksmith_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// TestTryOnceStrategiesMakeOneAttempt: NoRetry and LimitRetry(s, 0) both
// try once and start nothing: SET NX PX for a free lock; for a taken one,
// that and a GET of its holder's token, which tells a resend of the
// caller's own SET from another holder.
func TestTryOnceStrategiesMakeOneAttempt(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := locksmith.New(srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	for name, s := range map[string]locksmith.RetryStrategy{
		"NoRetry":       locksmith.NoRetry(),
		"LimitRetry(0)": locksmith.LimitRetry(locksmith.LinearBackoff(10*time.Millisecond), 0),
	} {
		t.Run(name, func(t *testing.T) {
			cnt := &counter{}
			l := locksmith.New(newClient(t, srv.Options(), []redis.Hook{cnt}))
			require.NoError(t, l.Check(ctx))
			cnt.reset()
			ignore := goleak.IgnoreCurrent()
			_, err := l.Obtain(ctx, key, locksmith.WithRetry(s))
			require.ErrorIs(t, err, locksmith.ErrNotObtained)
			require.Equal(t, []string{"set", "get"}, cnt.all(), "commands sent for a taken lock")
			cnt.reset()
			lk, err := l.Obtain(ctx, uniqueKey(t), locksmith.WithRetry(s))
			require.NoError(t, err)
			require.Equal(t, []string{"set"}, cnt.all(), "commands sent for a free lock")
			require.NoError(t, lk.Release(ctx))
			goleak.VerifyNone(t, ignore)
		})
	}
	require.NoError(t, holder.Release(ctx))
}

// TestBudgetIsTheDelays: against a lock held throughout, every call with
// LimitRetry(LinearBackoff(d), n) waits about n×d before it gives up,
// however many goroutines of the Locker wait with it (attempts that
// announcements or the holder's TTL bring about do not spend the budget).
func TestBudgetIsTheDelays(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := locksmith.New(srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	const (
		d       = 10 * time.Millisecond
		n       = 5
		callers = 8
	)
	strategy := locksmith.LimitRetry(locksmith.LinearBackoff(d), n)
	for round := range 10 {
		l := locksmith.New(newClient(t, srv.Options(), nil), locksmith.WithRetry(strategy))
		var wg sync.WaitGroup
		took := make(chan time.Duration, callers)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := l.Obtain(ctx, key)
				if !errors.Is(err, locksmith.ErrNotObtained) {
					t.Errorf("Obtain = %v, want ErrNotObtained", err)
				}
				took <- time.Since(start)
			}()
		}
		wg.Wait()
		close(took)
		for dur := range took {
			// A slot may end a little early (timers, the first attempt's
			// round trip), never by a whole delay.
			require.GreaterOrEqual(t, dur, (n-1)*d, "round %d: a call gave up after %v, before its %d delays of %v", round, dur, n, d)
		}
		require.NoError(t, l.Close())
	}
	require.NoError(t, holder.Release(ctx))
}
