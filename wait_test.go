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

// wakeBound is how soon after a release the waiters of
// requireWokenByRelease must have the lock: well within the two seconds
// after which a waiter renews its handoff queue entry (an attempt, which
// would find the lock handed to it even if no announcement came).
const wakeBound = time.Second

// requireWokenByRelease checks that a waiter whose retry strategy and
// holder's TTL cannot wake it within the test (forever, a minute) gets the
// lock on key within wakeBound of the holder's release: only the
// announcement can have woken it. The waiter's Locker has its permission
// check behind it (see checked), and attempts counts its script calls.
// The release comes once its Locker is subscribed (subscribed(channel)
// waits for that) and has made the attempt that follows the
// subscription's confirmation, so that the waiter is asleep.
func requireWokenByRelease(t *testing.T, holder, waiter *locksmith.Locker, attempts *scripts, subscribed func(channel string), key string) {
	t.Helper()
	ctx := t.Context()
	hl, err := holder.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	names, err := waiter.Keys(key)
	require.NoError(t, err)
	attempts.n.Store(0)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := obtainInBackground(wctx, waiter, nil, key, locksmith.WithRetry(forever))
	subscribed(names.Channel)
	attempts.wait(t, 2) // the first attempt and the one after the confirmation
	released := time.Now()
	require.NoError(t, hl.Release(ctx))
	r := receive(t, got, "waiter for "+key)
	require.NoError(t, r.err, "waiter for %q", key)
	require.NoError(t, r.lk.Release(ctx))
	require.Less(t, r.at.Sub(released), wakeBound, "the waiter for %q was not woken by the release", key)
}

func TestWaiterWokenByRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		attempts := &scripts{}
		waiter := checked(t, newLocker(t, b.client(t, attempts)), &attempts.n)
		raw := b.client(t)
		requireWokenByRelease(t, newLocker(t, b.client(t)), waiter, attempts,
			func(ch string) { waitSubscribed(t, raw, ch, 1) }, uniqueKey(t))
	})
}

func TestQueuedWaitersSendNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		key, other := uniqueKey(t), uniqueKey(t)
		holder, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		defer holder.Release(ctx)

		cnt, attempts := &counter{}, &scripts{}
		l := checked(t, newLocker(t, b.client(t, cnt, attempts)), &attempts.n)
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wait := func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The head polls once per delay (see
				// TestPollingDoesNotGrowWithWaiters): make that never.
				_, err := l.Obtain(wctx, key, locksmith.WithRetry(forever))
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Obtain = %v, want context.Canceled", err)
				}
			}()
		}
		// The head settles: it is subscribed and has made the attempt
		// that follows the confirmation. From then on this Locker sends
		// nothing unless woken, however many goroutines join it.
		wait()
		waitSubscribed(t, b.client(t), plainNames(key).Channel, 1)
		attempts.wait(t, 2)
		settled := cnt.count()
		for range 31 {
			wait()
		}

		// Those joining, releases of another key, and time passing, wake
		// nobody.
		ol := newLocker(t, b.client(t))
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
		holder, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)

		attempts := &scripts{}
		l := checked(t, newLocker(t, b.client(t, attempts)), &attempts.n)
		headCtx, cancelHead := context.WithCancel(ctx)
		headDone := make(chan error, 1)
		go func() {
			_, err := l.Obtain(headCtx, key, locksmith.WithRetry(forever))
			headDone <- err
		}()
		// The head is asleep: subscribed, and past the attempt after
		// the confirmation.
		waitSubscribed(t, b.client(t), plainNames(key).Channel, 1)
		attempts.wait(t, 2)
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
		// Joining behind the head sends nothing: watch the Locker's
		// queue instead.
		eventually(t, 5*time.Second, func() bool { return locksmith.QueuedWaiters(l, plainNames(key).Channel) == 2 },
			"the second waiter did not queue behind the head")
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
		l := newLocker(t, b.client(t))
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
				ls[i] = newLocker(t, srv.Client(t))
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
	holder, err := newLocker(t, srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	waiter := newLocker(t, srv.Client(t))
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
	waitSubscribed(t, raw, plainNames(key).Channel, 1)
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
	cl := redistest.SharedCluster(t)
	holder := newLocker(t, cl.Client(t))
	for _, key := range []string{uniqueKey(t), "{" + uniqueKey(t) + "}:x", uniqueKey(t) + "}"} {
		attempts := &scripts{}
		waiter := checked(t, newLocker(t, clusterClient(t, cl, attempts)), &attempts.n)
		requireWokenByRelease(t, holder, waiter, attempts,
			func(ch string) { waitShardSubscribed(t, cl, ch, 1) }, key)
	}
	// TestClusterReleaseAnnouncedBySPublish checks, on every master,
	// that the announcements were sharded.
}

// compareAndDelete is the release of the plain recipe other clients use
// (SET key token NX EX, then this): it announces nothing.
var compareAndDelete = redis.NewScript(
	`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// noticeBound is how soon a waiter polling every 50ms must notice a
// release that was not announced: many delays on a busy machine, and well
// under what waiters used to wait for (their queue entry's renewal, 2s
// after their last attempt, or, unqueued, the holder's 30s TTL).
const noticeBound = time.Second

// requireUnannouncedReleaseNoticed holds key with the plain recipe, with
// a 30s TTL, on every one of servers, lets a waiter from waiter (whose
// attempts cnt counts) wait for it, releases it with release and checks
// that the waiter obtains the lock within noticeBound.
func requireUnannouncedReleaseNoticed(t *testing.T, servers []*redis.Client, waiter *locksmith.Locker, cnt *counter,
	key string, release func(ctx context.Context, c *redis.Client, key, token string) error, opts ...locksmith.Option) {
	t.Helper()
	ctx := t.Context()
	const token = "plain-recipe-holder"
	for _, c := range servers {
		require.NoError(t, c.SetNX(ctx, key, token, 30*time.Second).Err())
	}
	type result struct {
		lk  *locksmith.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		lk, err := waiter.Obtain(wctx, key, append(opts, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))...)
		got <- result{lk, err, time.Now()}
	}()
	// Three attempts: past the first one and the one that follows the
	// subscription's confirmation, so the waiter is waiting on its own.
	eventually(t, 5*time.Second, func() bool { return cnt.countOf("evalsha") >= 3 }, "the waiter did not try three times")
	for _, c := range servers {
		require.NoError(t, release(ctx, c, key, token))
	}
	released := time.Now()
	r := <-got
	require.NoError(t, r.err)
	took := r.at.Sub(released)
	t.Logf("obtained %v after the unannounced release", took)
	require.Less(t, took, noticeBound, "the waiter noticed the release too late")
	require.NoError(t, r.lk.Release(ctx))
}

// unannouncedReleases are the ways a lock is freed without an
// announcement.
var unannouncedReleases = []struct {
	name    string
	release func(ctx context.Context, c *redis.Client, key, token string) error
}{
	{"compare-and-delete", func(ctx context.Context, c *redis.Client, key, token string) error {
		n, err := compareAndDelete.Run(ctx, c, []string{key}, token).Int()
		if err == nil && n != 1 {
			err = errors.New("compare-and-delete deleted nothing")
		}
		return err
	}},
	{"DEL", func(ctx context.Context, c *redis.Client, key, _ string) error {
		return c.Del(ctx, key).Err()
	}},
}

func TestUnannouncedReleaseNoticed(t *testing.T) {
	srv := redistest.Shared(t)
	for _, rel := range unannouncedReleases {
		t.Run(rel.name, func(t *testing.T) {
			cnt := &counter{}
			waiter := newLocker(t, newClient(t, srv.Options(), []redis.Hook{cnt}))
			requireUnannouncedReleaseNoticed(t, []*redis.Client{srv.Client(t)}, waiter, cnt, uniqueKey(t), rel.release)
		})
	}
}

func TestUnannouncedReleaseNoticedByQuorum(t *testing.T) {
	var (
		raw     []*redis.Client
		clients []redis.UniversalClient
	)
	cnt := &counter{}
	for i := range 3 {
		srv := redistest.New(t)
		raw = append(raw, srv.Client(t))
		var hooks []redis.Hook
		if i == 0 {
			hooks = append(hooks, cnt) // one count per attempt
		}
		opt := srv.Options()
		opt.ContextTimeoutEnabled = true
		clients = append(clients, newClient(t, opt, hooks))
	}
	waiter := newQuorumLocker(t, clients)
	for _, rel := range unannouncedReleases {
		t.Run(rel.name, func(t *testing.T) {
			cnt.reset()
			requireUnannouncedReleaseNoticed(t, raw, waiter, cnt, uniqueKey(t), rel.release)
		})
	}
}

func TestUnannouncedReleaseNoticedWithReplicas(t *testing.T) {
	primary := redistest.New(t, "--repl-diskless-sync-delay", "0")
	startReplica(t, primary)
	cnt := &counter{}
	waiter := newLocker(t, newClient(t, primary.Options(), []redis.Hook{cnt}))
	for _, rel := range unannouncedReleases {
		t.Run(rel.name, func(t *testing.T) {
			cnt.reset()
			requireUnannouncedReleaseNoticed(t, []*redis.Client{primary.Client(t)}, waiter, cnt, uniqueKey(t), rel.release,
				locksmith.WithReplicas(1, time.Second))
		})
	}
}

// TestPollingDoesNotGrowWithWaiters checks the cost of noticing releases
// that are not announced: only the head of a Locker's queue polls, once
// per delay, however many goroutines wait.
func TestPollingDoesNotGrowWithWaiters(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	holder, err := newLocker(t, srv.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	defer holder.Release(ctx)

	cnt := &counter{}
	l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{cnt}))
	const (
		waiters = 16
		delay   = 50 * time.Millisecond
	)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, waiters)
	wait := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Obtain(wctx, key, locksmith.WithRetry(locksmith.LinearBackoff(delay)))
			errs <- err
		}()
	}
	// Once the first waiter is in the Locker's queue, the others join it
	// without trying. (Counting its scripts instead would also count the
	// Locker's first-call permission check: the others could then start
	// before it has joined, and each try once inside the window.)
	channel := plainNames(key).Channel
	queued := func(n int) func() bool {
		return func() bool { return locksmith.QueuedWaiters(l, channel) == n }
	}
	wait()
	eventually(t, 5*time.Second, queued(1), "the first waiter did not queue")
	for range waiters - 1 {
		wait()
	}
	eventually(t, 5*time.Second, queued(waiters), "the waiters did not queue")
	cnt.reset()
	start := time.Now()
	time.Sleep(time.Second) // the window in which attempts are counted
	attempts := cnt.countOf("evalsha")
	window := time.Since(start)
	cancel()
	for range waiters {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	slots := int(window / delay)
	t.Logf("%d waiters, %v: %d attempts in %d delays", waiters, window.Round(time.Millisecond), attempts, slots)
	require.Positive(t, attempts, "nobody polled")
	require.LessOrEqual(t, attempts, slots+2, "more than one attempt per delay")
}
