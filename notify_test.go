package locksmith_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// forever is a retry strategy whose timer never fires within a test: a
// waiter using it can only be woken by a release announcement or by the
// holder's TTL running out.
var forever = locksmith.LinearBackoff(time.Hour)

// requireWokenByRelease checks that a waiter whose retry strategy and
// holder's TTL cannot wake it within the test (forever, a minute) gets the
// lock on key when the holder releases it: only the announcement can have
// woken it. The holder and the waiter each use a Locker from newLocker.
func requireWokenByRelease(t *testing.T, newLocker func() *locksmith.Locker, key string) {
	t.Helper()
	ctx := t.Context()
	holder, err := newLocker().Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	waiter := newLocker()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lk, err := waiter.Obtain(wctx, key, locksmith.WithRetry(forever))
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter subscribe
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got, "waiter for %q", key)
}

func TestWaiterWokenByRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		requireWokenByRelease(t, func() *locksmith.Locker { return locksmith.New(b.client(t)) }, uniqueKey(t))
	})
}

func TestQueuedWaitersSendNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key, other := uniqueKey(t), uniqueKey(t)
		holder, err := locksmith.New(b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		defer holder.Release(ctx)

		cnt := &counter{}
		l := locksmith.New(b.client(t, cnt))
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.Obtain(wctx, key, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Obtain = %v, want context.Canceled", err)
				}
			}()
		}
		// Let them all queue up and the subscription settle.
		eventually(t, 5*time.Second, func() bool { return cnt.count() >= 1 }, "no attempt")
		time.Sleep(200 * time.Millisecond)
		settled := cnt.count()

		// Releases of another key, and time passing, wake nobody.
		ol := locksmith.New(b.client(t))
		for range 20 {
			lk, err := ol.Obtain(ctx, other)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
		}
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, settled, cnt.count(), "queued waiters sent requests though nothing of theirs was released")
		cancel()
		wg.Wait()
	})
}

func TestNextInLineServedWhenHeadGivesUp(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key := uniqueKey(t)
		holder, err := locksmith.New(b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)

		l := locksmith.New(b.client(t))
		headCtx, cancelHead := context.WithCancel(ctx)
		headDone := make(chan error, 1)
		go func() {
			_, err := l.Obtain(headCtx, key, locksmith.WithRetry(forever))
			headDone <- err
		}()
		time.Sleep(50 * time.Millisecond)
		second := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			lk, err := l.Obtain(wctx, key, locksmith.WithRetry(forever))
			if err == nil {
				err = lk.Release(ctx)
			}
			second <- err
		}()
		time.Sleep(50 * time.Millisecond)
		cancelHead()
		require.ErrorIs(t, <-headDone, context.Canceled)
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, <-second, "the waiter behind a head that gave up was stranded")
	})
}

func TestFairnessWithinLocker(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		key := uniqueKey(t)
		l := locksmith.New(b.client(t))
		const workers = 8
		var (
			mu       sync.Mutex
			counts   [workers]int
			last     = -1
			again    int
			total    int
			stopping atomic.Bool
			wg       sync.WaitGroup
		)
		time.AfterFunc(time.Second, func() { stopping.Store(true) })
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stopping.Load() {
					err := l.WithLock(ctx, key, func(context.Context) error {
						mu.Lock()
						counts[i]++
						total++
						if last == i {
							again++
						}
						last = i
						mu.Unlock()
						time.Sleep(500 * time.Microsecond)
						return nil
					}, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
					if err != nil {
						t.Errorf("WithLock: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		mean := float64(total) / workers
		for i, n := range counts {
			require.GreaterOrEqual(t, float64(n), mean/2, "worker %d starved: %v", i, counts)
		}
		// A releaser that asks again at once queues behind the others.
		require.Less(t, float64(again), 0.2*float64(total), "releasers barged in: %d of %d", again, total)
		t.Logf("acquisitions %d, per worker %v, same worker again %d", total, counts, again)
	})
}

// readsProcessed returns the server's count of requests read so far.
func readsProcessed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_reads_processed in INFO stats")
	return 0
}

func TestRequestsPerAcquisitionDoNotGrowWithWaiters(t *testing.T) {
	srv := redistest.New(t)
	raw := srv.Client(t)
	// Up to 256 goroutines waiting over two Lockers.
	for _, tc := range []struct{ perLocker, rounds int }{{1, 6}, {8, 6}, {128, 3}} {
		perLocker, rounds := tc.perLocker, tc.rounds
		t.Run(strconv.Itoa(perLocker), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			key := uniqueKey(t)
			const lockers = 2
			ls := make([]*locksmith.Locker, lockers)
			for i := range ls {
				ls[i] = locksmith.New(srv.Client(t))
				warmUp(t, ls[i])
			}
			before := readsProcessed(t, raw)
			n, overlaps := contend(t, ctx, ls, key, perLocker, rounds, 300*time.Microsecond,
				locksmith.LinearBackoff(100*time.Millisecond))
			requests := readsProcessed(t, raw) - before - 1 // less this INFO
			require.Zero(t, overlaps)
			require.Equal(t, int64(lockers*perLocker*rounds), n)
			perAcq := float64(requests) / float64(n)
			t.Logf("%d waiters per Locker: %d requests for %d acquisitions = %.2f each", perLocker, requests, n, perAcq)
			// 2 + L per acquisition, plus a little for each goroutine's
			// first attempt and the subscriptions.
			require.LessOrEqual(t, perAcq, float64(2+lockers)+0.5)
		})
	}
}

func TestDroppedSubscriptionStrandsNoWaiter(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	raw := srv.Client(t)
	key := uniqueKey(t)
	holder, err := locksmith.New(srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	waiter := locksmith.New(srv.Client(t))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		lk, err := waiter.Obtain(wctx, key, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	// Cut the waiter's subscription and release while it is down, so the
	// announcement is lost: the waiter must still get the lock.
	require.NoError(t, raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-got)
}

// TestWaiterWokenOnCluster checks the sharded announcements: SPUBLISH in
// the release script, SSUBSCRIBE by the waiting Locker, for keys with and
// without hash tags.
func TestWaiterWokenOnCluster(t *testing.T) {
	cc := redistest.SharedCluster(t).Client(t)
	for _, key := range []string{uniqueKey(t), "{" + uniqueKey(t) + "}:x", uniqueKey(t) + "}"} {
		requireWokenByRelease(t, func() *locksmith.Locker { return locksmith.New(cc) }, key)
	}
	// TestClusterReleaseAnnouncedBySPublish checks, on every master,
	// that the announcements were sharded.
}
