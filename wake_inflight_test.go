package locksmith_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// holdNext holds the reply of the next script call once armed, after
// Redis has run it, until release is closed: an attempt on its way back.
type holdNext struct {
	armed   atomic.Bool
	ran     chan struct{}
	release chan struct{}
}

func (h *holdNext) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			close(h.ran)
			<-h.release
		}
		return err
	}
}

func (h *holdNext) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReleaseHeardDuringAnAttempt: a release that does not hand the lock
// over (here a delete and an empty announcement, as `locksmith release
// --force` sends), announced while the head's attempt, sent before it, is
// on its way back, wakes the head all the same: it tries again as soon as
// that attempt has failed, not at the end of its retry delay. (Found by
// the SPIN model of the lock: model/NOTES-lock.md.)
func TestReleaseHeardDuringAnAttempt(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	hold := &holdNext{ran: make(chan struct{}), release: make(chan struct{})}
	other := newClient(t, srv.Options(), nil)
	waiter := newLocker(t, newClient(t, srv.Options(), []redis.Hook{hold}))
	warmUp(t, waiter)
	_, err := newLocker(t, other).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	const delay = time.Second
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		lk, err := waiter.Obtain(ctx, key, locksmith.WithTTL(time.Minute),
			locksmith.WithRetry(locksmith.LinearBackoff(delay)))
		at := time.Now()
		if err == nil {
			_ = lk.Release(context.Background())
		}
		done <- result{at, err}
	}()
	channel := plainNames(key).Channel
	waitSubscribed(t, other, channel, 1)
	// Its first attempts are over (the first, and the one its
	// subscription's confirmation asked for): it sleeps until its slot
	// ends.
	eventually(t, 5*time.Second, func() bool {
		events, busy := locksmith.HeardOn(waiter, channel)
		return events >= 1 && !busy
	}, "the waiter did not settle into its retry slot")
	hold.armed.Store(true)
	select {
	case <-hold.ran: // the attempt at the end of its slot ran in Redis, and lost
	case <-time.After(3 * delay):
		t.Fatal("no attempt at the end of the retry slot")
	}
	require.NoError(t, other.Del(ctx, key).Err())
	require.NoError(t, other.Publish(ctx, channel, "").Err())
	released := time.Now()
	// The announcement reaches the waiter's Locker while the attempt is
	// on its way back.
	eventually(t, 5*time.Second, func() bool {
		events, _ := locksmith.HeardOn(waiter, channel)
		return events >= 2
	}, "the waiter's Locker did not hear the release")
	close(hold.release)
	r := <-done
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(released), delay/2,
		"the release heard while the head's attempt was on its way did not make it try again")
}
