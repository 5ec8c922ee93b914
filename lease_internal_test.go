package locksmith

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// pipelinesSent is a go-redis hook that signals each pipeline of scripts
// the client has sent and had answered (not those go-redis sends itself
// when it opens a connection).
type pipelinesSent chan struct{}

func (p pipelinesSent) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p pipelinesSent) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p pipelinesSent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				select {
				case p <- struct{}{}:
				default:
				}
				break
			}
		}
		return err
	}
}

// TestLeaseWatchdogArmedByRenewer: a lease renewed by its store's renewer
// has no watchdog timer while it waits for its first renewal (the
// renewer takes it out of the order before the Deadline); the renewer
// arms the watchdog before it sends the renewal, and the lease keeps it.
// A lease whose renewal would come too close to the Deadline, or that is
// renewed by a goroutine of its own, has one from the start.
func TestLeaseWatchdogArmedByRenewer(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	watchdog := func(lk *Lock) *time.Timer {
		lk.mu.Lock()
		defer lk.mu.Unlock()
		return lk.lease.watchdog
	}
	sent := make(pipelinesSent, 1)
	c := srv.Client(t)
	c.AddHook(sent)
	// The first renewal a second away: the check before it has that long
	// on a busy machine.
	l := New(c, WithTTL(10*time.Second), WithRenewInterval(time.Second))
	t.Cleanup(func() { _ = l.Close() })

	lk, err := l.Obtain(ctx, t.Name())
	require.NoError(t, err)
	lk.Lease(ctx)
	require.Nil(t, watchdog(lk), "a watchdog before the first renewal")
	select {
	case <-sent: // the first renewal's pipeline
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	require.NotNil(t, watchdog(lk), "no watchdog once the renewal was sent")
	require.NoError(t, lk.Release(ctx))

	// A renewal due within maxRenewSlack of the watchdog: armed at once.
	near, err := l.Obtain(ctx, t.Name(), WithTTL(200*time.Millisecond), WithRenewInterval(190*time.Millisecond))
	require.NoError(t, err)
	near.Lease(ctx)
	require.NotNil(t, watchdog(near), "no watchdog for a renewal due close to the Deadline")
	require.NoError(t, near.Release(ctx))

	renewAlone.Store(true)
	t.Cleanup(func() { renewAlone.Store(false) })
	alone, err := l.Obtain(ctx, t.Name())
	require.NoError(t, err)
	alone.Lease(ctx)
	require.NotNil(t, watchdog(alone), "no watchdog for a lease with a goroutine of its own")
	require.NoError(t, alone.Release(ctx))
}
