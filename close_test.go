package locksmith_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// TestClose checks what Close promises: waiting Obtain calls return
// ErrClosed at once and leave nothing behind, later calls send nothing,
// locks obtained before can still be released, and no goroutine of the
// Locker is left once Close returns (goleak, without waiting).
func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T, hooks ...redis.Hook) redis.UniversalClient
	}{
		{"server", func(t *testing.T, hooks ...redis.Hook) redis.UniversalClient {
			return newClient(t, redistest.Shared(t).Options(), hooks)
		}},
		{"cluster", func(t *testing.T, hooks ...redis.Hook) redis.UniversalClient {
			c := redistest.SharedCluster(t).Client(t)
			for _, h := range hooks {
				c.AddHook(h)
			}
			c.OnNewNode(func(n *redis.Client) {
				for _, h := range hooks {
					n.AddHook(h)
				}
			})
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			admin := tc.client(t)
			key := uniqueKey(t)
			holder, err := locksmith.New(admin).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
			require.NoError(t, err)
			other := uniqueKey(t)

			ignore := goleak.IgnoreCurrent()
			cnt := &counter{}
			client := tc.client(t, cnt)
			l := locksmith.New(client, locksmith.WithRetry(locksmith.LinearBackoff(time.Second)))
			before, err := l.Obtain(ctx, other)
			require.NoError(t, err)

			const waiters = 3
			errs := make(chan error, waiters)
			var wg sync.WaitGroup
			for range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := l.Obtain(ctx, key)
					errs <- err
				}()
			}
			k := plainNames(key)
			eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, k.Queue).Val() == 1 }, "a waiter queued")

			require.NoError(t, l.Close())
			wg.Wait()
			for range waiters {
				err := <-errs
				require.ErrorIs(t, err, locksmith.ErrClosed)
				require.NotErrorIs(t, err, locksmith.ErrNotObtained)
			}
			require.Zero(t, admin.Exists(ctx, k.Queue).Val(), "a waiter left its queue entry")
			require.Equal(t, holder.Token(), admin.Get(ctx, key).Val())

			// Later calls send nothing; the lock from before is released.
			cnt.reset()
			_, err = l.Obtain(ctx, key)
			require.ErrorIs(t, err, locksmith.ErrClosed)
			err = l.WithLock(ctx, key, func(context.Context) error { return nil })
			require.ErrorIs(t, err, locksmith.ErrClosed)
			_, err = l.Once(ctx, key, func(context.Context) error { return nil })
			require.ErrorIs(t, err, locksmith.ErrClosed)
			require.ErrorIs(t, l.Check(ctx), locksmith.ErrClosed)
			require.Zero(t, cnt.count(), "a closed Locker sent commands")
			require.NoError(t, before.Release(ctx))
			require.NoError(t, l.Close(), "a second Close")

			require.NoError(t, client.Close())
			goleak.VerifyNone(t, ignore)
			require.NoError(t, holder.Release(ctx))
		})
	}
}

// stallingDialer dials through net.Dialer, except while stall is set:
// then it blocks until its context ends.
type stallingDialer struct {
	stall   atomic.Bool
	stalled atomic.Int64 // dials blocked so far
}

func (d *stallingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.stall.Load() {
		d.stalled.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// TestStalledSubscriptionDial stalls the dial of a Locker's pub/sub
// connection: its Obtain calls still honour their contexts, calls on other
// keys go on, and Close ends the dial and returns.
func TestStalledSubscriptionDial(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	admin := srv.Client(t)
	key := uniqueKey(t)
	holder, err := locksmith.New(admin).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	d := &stallingDialer{}
	opt := srv.Options()
	opt.Dialer, opt.DialTimeout, opt.ContextTimeoutEnabled = d.dial, time.Minute, true
	client := newClient(t, opt, nil)
	// A delay longer than the wait: the context ends while the waiter
	// sleeps, not while a command is on the wire (which would break its
	// pooled connection, and the cleanup after it would need a dial).
	l := locksmith.New(client, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
	// Pooled connections for the locking commands, dialed before the stall.
	warmUp(t, l)
	d.stall.Store(true)

	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.Obtain(wctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second, "Obtain did not honour its context while its subscription was dialed")
	require.Positive(t, d.stalled.Load(), "the pub/sub dial was not stalled: the test proves nothing")

	// Another key, while the dial still hangs.
	lk, err := l.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	closed := make(chan struct{})
	go func() {
		_ = l.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while the pub/sub dial hung")
	}
	require.NoError(t, holder.Release(ctx))
}

// TestZeroLocker: the zero Locker is not usable, and says so.
func TestZeroLocker(t *testing.T) {
	var l locksmith.Locker
	ctx := t.Context()
	_, err := l.Obtain(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.ErrorIs(t, l.WithLock(ctx, "k", func(context.Context) error { return nil }), locksmith.ErrInvalidArgument)
	_, err = l.Once(ctx, "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, _, err = l.Completed(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = l.Inspect(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.ErrorIs(t, l.Check(ctx), locksmith.ErrInvalidArgument)
	require.NoError(t, l.Close())
}
