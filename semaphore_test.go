package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The semaphore's tests run against a real redis-server: permits expire
// by the server's clock (TIME inside the scripts), which miniredis does
// not move with FastForward.

func TestSemaphoreLimit(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	raw := srv.Client(t)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 3)
	require.Equal(t, key, sem.Key())
	require.Equal(t, 3, sem.Limit())

	var permits []*locksmith.Lock
	seen := map[string]bool{}
	for range 3 {
		p, err := sem.Acquire(ctx, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		require.False(t, seen[p.Token()], "two permits with one token")
		seen[p.Token()] = true
		permits = append(permits, p)
	}
	_, err := sem.Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a fourth permit of three")
	require.EqualValues(t, 3, raw.ZCard(ctx, key).Val())

	ttl, err := permits[0].TTL(ctx)
	require.NoError(t, err)
	require.InDelta(t, time.Minute.Seconds(), ttl.Seconds(), 5)

	require.NoError(t, permits[0].Release(ctx))
	require.ErrorIs(t, permits[0].Release(ctx), locksmith.ErrNotHeld, "a permit given back twice")
	p, err := sem.Acquire(ctx)
	require.NoError(t, err, "a permit given back is free again")
	permits = append(permits[1:], p)
	for _, p := range permits {
		require.NoError(t, p.Release(ctx))
	}
	require.Zero(t, raw.Exists(ctx, key).Val(), "the semaphore's key outlived its permits")
}

// TestSemaphoreNeverExceedsLimit shares 4 permits between 3 Lockers of 32
// goroutines each, all waiting, and counts the holders inside the
// critical section.
func TestSemaphoreNeverExceedsLimit(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	key := uniqueKey(t)
	const (
		limit   = 4
		lockers = 3
		workers = 32
		rounds  = 3
	)
	var (
		inside, most, done atomic.Int64
		wg                 sync.WaitGroup
	)
	for range lockers {
		sem := newLocker(t, srv.Client(t), locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond))).Semaphore(key, limit)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := sem.WithPermit(ctx, func(context.Context) error {
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(time.Millisecond) // the work
						inside.Add(-1)
						return nil
					}, locksmith.WithTTL(10*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	require.EqualValues(t, lockers*workers*rounds, done.Load())
	require.LessOrEqual(t, most.Load(), int64(limit), "more holders than permits")
	require.Greater(t, most.Load(), int64(1), "the permits were never held together")
	require.Zero(t, srv.Client(t).Exists(ctx, key).Val(), "permits left behind")
}

func TestSemaphoreCrashedHolderPermitComesBack(t *testing.T) {
	srv := redistest.Shared(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	l := newLocker(t, srv.Client(t))
	sem := l.Semaphore(key, 2)
	// A live holder keeps the semaphore's key alive throughout, so only
	// the crashed holder's own TTL can free its permit.
	live, err := sem.Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	const ttl = 300 * time.Millisecond
	// The holder "crashes": it never releases, nor renews.
	crashed, err := sem.Acquire(ctx, locksmith.WithTTL(ttl))
	require.NoError(t, err)
	_, err = sem.Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)

	start := time.Now()
	p, err := sem.Acquire(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	require.NoError(t, err, "the crashed holder's permit did not come back")
	waited := time.Since(start)
	// Woken by the earliest permit's TTL, which the refused attempt
	// reported, not by the hour-long delay.
	require.Less(t, waited, ttl+5*time.Second)
	require.ErrorIs(t, crashed.Release(ctx), locksmith.ErrNotHeld, "an expired permit was given back")
	require.NoError(t, p.Release(ctx))
	require.NoError(t, live.Release(ctx))
}

// A release hands the permit to the waiter queued for one, in the same
// step, as a lock's does: the waiter sends nothing after the release.
func TestSemaphoreReleaseHandsThePermitOver(t *testing.T) {
	srv := redistest.Shared(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	holder, err := newLocker(t, srv.Client(t)).Semaphore(key, 1).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	attempts := &scripts{}
	sem := newLocker(t, newClient(t, srv.Options(), []redis.Hook{attempts})).Semaphore(key, 1)
	got := acquireInBackground(ctx, sem, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	// Subscribed, and past the attempt made on the confirmation.
	waitSubscribed(t, srv.Client(t), plainNames(key).Channel, 1)
	attempts.wait(t, 3) // the permission check, the first attempt, the one on the confirmation
	before := attempts.n.Load()
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	// Handed over by the release itself, before the waiter heard of it.
	members := srv.Client(t).ZRange(ctx, key, 0, -1).Val()
	require.Len(t, members, 1)
	require.NotEqual(t, holder.Token(), members[0], "the release did not give the permit back")
	r := <-got
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(released), 5*time.Second, "the waiter did not hear of the handoff")
	require.Equal(t, members[0], r.lk.Token(), "the waiter did not get the permit handed to it")
	require.EqualValues(t, 0, attempts.n.Load()-before, "attempts after the release")
	require.NoError(t, r.lk.Release(ctx))
}

// TestSemaphoreUnannouncedRelease frees a permit behind the library's
// back (ZREM, no announcement): the waiter notices at its next delay.
func TestSemaphoreUnannouncedRelease(t *testing.T) {
	srv := redistest.Shared(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	raw := srv.Client(t)
	holder, err := newLocker(t, srv.Client(t)).Semaphore(key, 1).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 1)
	got := acquireInBackground(ctx, sem, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	waitSubscribed(t, raw, plainNames(key).Channel, 1)
	removed := time.Now()
	require.EqualValues(t, 1, raw.ZRem(ctx, key, holder.Token()).Val())
	r := <-got
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(removed), 5*time.Second)
	require.NoError(t, r.lk.Release(ctx))
}

func TestSemaphoreBudgetIsTheDelays(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := newLocker(t, srv.Client(t)).Semaphore(key, 2).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	other, err := newLocker(t, srv.Client(t)).Semaphore(key, 2).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 2)
	const d, n = 20 * time.Millisecond, 5
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := sem.Acquire(ctx, locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(d), n)))
			if !errors.Is(err, locksmith.ErrNotObtained) {
				t.Errorf("Acquire = %v, want ErrNotObtained", err)
			}
			if waited := time.Since(start); waited < n*d-d/2 {
				t.Errorf("gave up after %v, before its %d delays of %v", waited, n, d)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, other.Release(ctx))
	require.Zero(t, srv.Client(t).Exists(ctx, key).Val(), "permits left behind")
}

func TestSemaphoreCancelledWaitLeavesNothing(t *testing.T) {
	srv := redistest.Shared(t)
	key := uniqueKey(t)
	raw := srv.Client(t)
	holder, err := newLocker(t, srv.Client(t)).Semaphore(key, 1).Acquire(t.Context(), locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 1)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() {
		_, err := sem.Acquire(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		got <- err
	}()
	waitSubscribed(t, raw, plainNames(key).Channel, 1)
	queue := plainNames(key).Queue
	eventually(t, 5*time.Second, func() bool { return raw.ZCard(t.Context(), queue).Val() == 2 }, "the waiter was not queued") // its entry's two members
	cancel()
	err = <-got
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{holder.Token()}, raw.ZRange(t.Context(), key, 0, -1).Val())
	require.Zero(t, raw.Exists(t.Context(), queue).Val(), "the waiter's queue entry was left behind")
	require.NoError(t, holder.Release(t.Context()))
	require.Zero(t, raw.Exists(t.Context(), key).Val(), "the release handed the permit to the waiter that left")
}

// Waiters of several Lockers are handed a semaphore's permit in the
// order they queued, each with a fencing token above its predecessor's.
func TestSemaphoreHandoffIsFirstComeFirstServed(t *testing.T) {
	srv := redistest.Shared(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	raw := srv.Client(t)
	queue := plainNames(key).Queue
	holder, err := newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 1).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	var got [3]<-chan obtained
	for i := range got {
		sem := newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 1)
		got[i] = acquireInBackground(ctx, sem, locksmith.WithTTL(time.Minute), locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		eventually(t, 5*time.Second, func() bool { return raw.ZCard(ctx, queue).Val() == int64(2*(i+1)) }, "waiter %d was not queued", i)
	}
	waitSubscribed(t, raw, plainNames(key).Channel, 3)
	prev := holder
	for i := range got {
		require.NoError(t, prev.Release(ctx))
		r := <-got[i]
		require.NoError(t, r.err, "waiter %d", i)
		require.Greater(t, r.lk.Fence(), prev.Fence(), "waiter %d's fence", i)
		require.Equal(t, []string{r.lk.Token()}, raw.ZRange(ctx, key, 0, -1).Val())
		for j := i + 1; j < len(got); j++ {
			require.Empty(t, got[j], "waiter %d was served before waiter %d", j, i)
		}
		prev = r.lk
	}
	require.NoError(t, prev.Release(ctx))
	require.Zero(t, raw.Exists(ctx, key, queue).Val(), "the semaphore or its queue was left behind")
}

func TestSemaphoreLeaseRenewsThePermit(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 2)
	const ttl = 300 * time.Millisecond
	p, err := sem.Acquire(ctx, locksmith.WithTTL(ttl))
	require.NoError(t, err)
	lctx := p.Lease(ctx)
	// Two renewals: the Deadline moves twice, past the first TTL.
	first := p.Deadline()
	eventually(t, 5*time.Second, func() bool { return p.Deadline().After(first) }, "the permit was not renewed")
	second := p.Deadline()
	eventually(t, 5*time.Second, func() bool { return p.Deadline().After(second) }, "the permit was not renewed again")
	require.NoError(t, lctx.Err())
	left, err := p.TTL(ctx)
	require.NoError(t, err)
	require.Greater(t, left, time.Duration(0))
	require.NoError(t, p.Release(ctx))
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), context.Canceled, "given back, not lost")
	require.NotErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
}

func TestSemaphoreLostPermitCancelsLease(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	raw := srv.Client(t)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 1)
	p, err := sem.Acquire(ctx, locksmith.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	lctx := p.Lease(ctx)
	require.EqualValues(t, 1, raw.ZRem(ctx, key, p.Token()).Val(), "take the permit away")
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
}

func TestSemaphoreFencing(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	sem := newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 3)
	var last int64
	var held []*locksmith.Lock
	for range 10 {
		p, err := sem.Acquire(ctx)
		require.NoError(t, err)
		require.Greater(t, p.Fence(), last, "fencing tokens must increase")
		last = p.Fence()
		// Keep up to two, so that permits are taken beside others.
		held = append(held, p)
		if len(held) > 2 {
			require.NoError(t, held[0].Release(ctx))
			held = held[1:]
		}
	}
	plain, err := newLocker(t, srv.Client(t)).Semaphore(uniqueKey(t)+"-plain", 1).Acquire(ctx)
	require.NoError(t, err)
	require.Zero(t, plain.Fence())
}

func TestSemaphoreLimitBelongsToTheCall(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	l := newLocker(t, srv.Client(t))
	one, err := l.Semaphore(key, 1).Acquire(ctx)
	require.NoError(t, err)
	_, err = l.Semaphore(key, 1).Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	two, err := l.Semaphore(key, 2).Acquire(ctx)
	require.NoError(t, err, "a caller with limit 2 enters beside one holder")
	_, err = l.Semaphore(key, 2).Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.NoError(t, one.Release(ctx))
	require.NoError(t, two.Release(ctx))
}

func TestSemaphoreAndLockDoNotShareAName(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	l := newLocker(t, srv.Client(t))

	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	_, err = l.Semaphore(key, 2).Acquire(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a lock's key reported as a full semaphore")
	require.ErrorContains(t, err, "WRONGTYPE")
	require.Equal(t, lk.Token(), raw.Get(ctx, key).Val(), "the lock was changed")
	require.NoError(t, lk.Release(ctx))

	key = uniqueKey(t) + "-sem"
	p, err := l.Semaphore(key, 2).Acquire(ctx)
	require.NoError(t, err)
	_, err = l.Obtain(ctx, key)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a semaphore's key reported as a held lock")
	require.NoError(t, p.Release(ctx))
}

func TestSemaphoreInvalidArguments(t *testing.T) {
	srv := redistest.Shared(t)
	sent := &counter{}
	l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{sent}))
	var quorum []redis.UniversalClient
	for range 3 {
		quorum = append(quorum, newClient(t, srv.Options(), []redis.Hook{sent}))
	}
	q := newQuorumLocker(t, quorum)
	noop := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		sem  *locksmith.Semaphore
		opts []locksmith.Option
	}{
		{"limit 0", l.Semaphore("k", 0), nil},
		{"negative limit", l.Semaphore("k", -1), nil},
		{"empty key", l.Semaphore("", 1), nil},
		{"zero Semaphore", &locksmith.Semaphore{}, nil},
		{"nil Semaphore", nil, nil},
		{"replicas", l.Semaphore("k", 1), []locksmith.Option{locksmith.WithReplicas(1, time.Second)}},
		{"replicas on the Locker", newLocker(t, newClient(t, srv.Options(), []redis.Hook{sent}),
			locksmith.WithReplicas(1, time.Second)).Semaphore("k", 1), nil},
		{"bad TTL", l.Semaphore("k", 1), []locksmith.Option{locksmith.WithTTL(0)}},
		{"quorum", q.Semaphore("k", 1), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent.reset()
			_, err := c.sem.Acquire(t.Context(), c.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.ErrorIs(t, c.sem.WithPermit(t.Context(), noop, c.opts...), locksmith.ErrInvalidArgument)
			require.Zero(t, sent.count(), "sent %v", sent.all())
		})
	}
	require.ErrorIs(t, l.Semaphore("k", 1).WithPermit(t.Context(), nil), locksmith.ErrInvalidArgument)
}

func TestWithPermit(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	raw := srv.Client(t)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 2)
	ran := false
	require.NoError(t, sem.WithPermit(ctx, func(ctx context.Context) error {
		ran = true
		require.EqualValues(t, 1, raw.ZCard(ctx, key).Val())
		return nil
	}))
	require.True(t, ran)
	require.Zero(t, raw.Exists(ctx, key).Val(), "the permit was not given back")

	boom := errors.New("boom")
	require.ErrorIs(t, sem.WithPermit(ctx, func(context.Context) error { return boom }), boom)
	require.Zero(t, raw.Exists(ctx, key).Val())

	require.Panics(t, func() {
		_ = sem.WithPermit(ctx, func(context.Context) error { panic("in the job") })
	})
	require.Zero(t, raw.Exists(ctx, key).Val(), "a panic kept the permit")

	// Lost while fn runs: its context ends, and the loss is reported.
	err := sem.WithPermit(ctx, func(ctx context.Context) error {
		members := raw.ZRange(ctx, key, 0, -1).Val()
		require.Len(t, members, 1)
		raw.ZRem(ctx, key, members[0])
		<-ctx.Done()
		return nil
	}, locksmith.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, locksmith.ErrLockLost)
}

func TestSemaphoreCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	holderLocker := newLocker(t, clusterClient(t, cl), locksmith.WithFencing())
	a, err := holderLocker.Semaphore(key, 2).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	b, err := holderLocker.Semaphore(key, 2).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	require.Greater(t, b.Fence(), a.Fence())

	sem := newLocker(t, clusterClient(t, cl), locksmith.WithFencing()).Semaphore(key, 2)
	got := acquireInBackground(ctx, sem, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	waitShardSubscribed(t, cl, plainNames(key).Channel, 1)
	st, err := sem.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Holders, 2)
	require.Equal(t, b.Fence(), st.Fence)
	require.Equal(t, 1, st.Listening, "the waiter's sharded subscription")
	require.Equal(t, 1, st.Queued, "the waiter's entry in the handoff queue")
	released := time.Now()
	require.NoError(t, a.Release(ctx))
	r := <-got
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(released), 5*time.Second, "the waiter did not hear the release (SPUBLISH)")
	require.Greater(t, r.lk.Fence(), b.Fence())
	require.NoError(t, r.lk.Release(ctx))
	require.NoError(t, b.Release(ctx))
}

// unreachableClient returns a client of a loopback port nothing listens
// on.
func unreachableClient(t *testing.T) *redis.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestSemaphoreRedisDown(t *testing.T) {
	sem := newLocker(t, unreachableClient(t)).Semaphore("k", 2)
	for _, opts := range [][]locksmith.Option{nil, {locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(10*time.Millisecond), 3))}} {
		_, err := sem.Acquire(t.Context(), opts...)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained, "an outage reported as a full semaphore")
		ran := false
		err = sem.WithPermit(t.Context(), func(context.Context) error { ran = true; return nil }, opts...)
		require.Error(t, err)
		require.False(t, ran)
	}
}

func TestSemaphoreInspect(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	raw := srv.Client(t)
	sem := newLocker(t, srv.Client(t)).Semaphore(key, 2)
	st, err := sem.Inspect(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Holders)
	require.Zero(t, st.Fence)
	require.Zero(t, st.Queued)

	long, err := sem.Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	short, err := sem.Acquire(ctx, locksmith.WithTTL(30*time.Second), locksmith.WithFencing())
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		_, err := newLocker(t, srv.Client(t)).Semaphore(key, 2).Acquire(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		waiting <- err
	}()
	waitSubscribed(t, raw, plainNames(key).Channel, 1)

	st, err = sem.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Holders, 2)
	require.Equal(t, short.Token(), st.Holders[0].Token, "the permit that expires first comes first")
	require.Equal(t, long.Token(), st.Holders[1].Token)
	require.InDelta(t, 30, st.Holders[0].TTL.Seconds(), 5)
	require.InDelta(t, 60, st.Holders[1].TTL.Seconds(), 5)
	require.Equal(t, short.Fence(), st.Fence)
	require.Equal(t, 1, st.Listening)
	require.Equal(t, 1, st.Queued, "the waiter's entry in the handoff queue")

	cancel()
	require.ErrorIs(t, <-waiting, context.Canceled)
	require.NoError(t, long.Release(t.Context()))
	require.NoError(t, short.Release(t.Context()))
	st, err = sem.Inspect(t.Context())
	require.NoError(t, err)
	require.Empty(t, st.Holders)
	require.Zero(t, st.Queued)
}

// A permit handed to a waiter that has waited more than half its TTL
// since it queued is confirmed before Acquire returns it: its TTL starts
// again, and it takes a fencing token of its own, above the one the
// release announced (other holders take tokens meanwhile, so the
// counter's is not the waiter's).
func TestSemaphoreLateHandoffIsConfirmed(t *testing.T) {
	srv := redistest.Shared(t)
	// Bounded: a waiter that is never served fails instead of hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	raw := srv.Client(t)
	names := plainNames(key)
	holder, err := newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 1).Acquire(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	announcements := raw.Subscribe(ctx, names.Channel)
	defer announcements.Close()
	_, err = announcements.Receive(ctx) // the subscription
	require.NoError(t, err)

	const ttl = 400 * time.Millisecond
	sem := newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 1)
	got := acquireInBackground(ctx, sem, locksmith.WithTTL(ttl), locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	// Wait, by the server's clock, until the waiter has been queued for
	// more than half its TTL.
	eventually(t, 5*time.Second, func() bool {
		entries := raw.ZRangeByScoreWithScores(ctx, names.Queue, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val()
		now := raw.Time(ctx).Val()
		return len(entries) == 1 && now.UnixMilli()-int64(entries[0].Score) > (ttl/2+50*time.Millisecond).Milliseconds()
	}, "the waiter was not queued")
	require.NoError(t, holder.Release(ctx))
	released := time.Now()
	msg, err := announcements.ReceiveMessage(ctx)
	require.NoError(t, err)
	var announcedTTL, announcedFence int64
	var token string
	_, err = fmt.Sscanf(msg.Payload, "%d %d %s", &announcedTTL, &announcedFence, &token)
	require.NoError(t, err, "the release announced %q, not a handoff", msg.Payload)
	require.Greater(t, announcedFence, holder.Fence())

	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, token, r.lk.Token())
	require.Greater(t, r.lk.Fence(), announcedFence, "the handed permit was not confirmed with a token of its own")
	counter, err := raw.Get(ctx, names.Fence).Int64()
	require.NoError(t, err)
	require.Equal(t, counter, r.lk.Fence())
	require.True(t, r.lk.Deadline().After(released.Add(ttl/2)), "the confirmed permit's validity did not start again")
	require.NoError(t, r.lk.Release(ctx))
}

// acquireInBackground starts sem.Acquire(ctx, opts...) and returns where
// its result will be, with when it returned.
func acquireInBackground(ctx context.Context, sem *locksmith.Semaphore, opts ...locksmith.Option) <-chan obtained {
	got := make(chan obtained, 1)
	go func() {
		p, err := sem.Acquire(ctx, opts...)
		got <- obtained{lk: p, err: err, at: time.Now()}
	}()
	return got
}
