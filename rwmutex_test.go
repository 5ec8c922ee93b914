package locksmith_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The read-write lock's tests run against a real redis-server: holds
// expire by the server's clock (TIME inside the scripts).

func TestRWMutexReadersOrOneWriter(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	raw := srv.Client(t)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	require.Equal(t, key, m.Key())

	var readers []*locksmith.Lock
	for range 3 {
		r, err := m.ObtainRead(ctx, locksmith.WithTTL(time.Minute))
		require.NoError(t, err, "readers share the lock")
		readers = append(readers, r)
	}
	_, err := m.ObtainWrite(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a writer beside readers")
	// A writer that tries once leaves no intent behind.
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Readers, 3)
	require.Nil(t, st.Writer)
	require.Zero(t, st.WaitingWriters)
	r, err := m.ObtainRead(ctx)
	require.NoError(t, err, "a reader after a writer that gave up")
	readers = append(readers, r)

	for _, r := range readers {
		require.NoError(t, r.Release(ctx))
	}
	w, err := m.ObtainWrite(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	_, err = m.ObtainWrite(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "two writers")
	_, err = m.ObtainRead(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a reader beside the writer")
	st, err = m.Inspect(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Writer)
	require.Equal(t, w.Token(), st.Writer.Token)
	require.InDelta(t, 60, st.Writer.TTL.Seconds(), 5)
	ttl, err := w.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.NoError(t, w.Release(ctx))
	require.ErrorIs(t, w.Release(ctx), locksmith.ErrNotHeld)
	require.Zero(t, raw.Exists(ctx, key).Val(), "the lock's key outlived its holds")
}

// TestRWMutexWaitingWriterStopsNewReaders: once a writer waits, readers
// that come after it wait too, and it gets the lock when the reader it
// waited for leaves.
func TestRWMutexWaitingWriterStopsNewReaders(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	reader, err := m.ObtainRead(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	writer := newLocker(t, srv.Client(t)).RWMutex(key)
	got := make(chan obtained, 1)
	go func() {
		w, err := writer.ObtainWrite(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		got <- obtained{lk: w, err: err, at: time.Now()}
	}()
	eventually(t, 5*time.Second, func() bool {
		st, err := m.Inspect(ctx)
		return err == nil && st.WaitingWriters == 1
	}, "the writer's intent")
	_, err = m.ObtainRead(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a new reader entered while a writer waits")

	released := time.Now()
	require.NoError(t, reader.Release(ctx))
	r := <-got
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(released), 5*time.Second, "the writer was not woken by the release")
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Zero(t, st.WaitingWriters, "the writer's intent outlived its wait")
	require.NoError(t, r.lk.Release(ctx))
}

// TestRWMutexWriterNotStarved: a writer gets the lock while readers keep
// coming, each one's hold overlapping the next's, within a bound.
func TestRWMutexWriterNotStarved(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := uniqueKey(t)
	readers := newLocker(t, srv.Client(t)).RWMutex(key)
	var (
		stop  atomic.Bool
		reads atomic.Int64
		wg    sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := readers.WithReadLock(ctx, func(context.Context) error {
					reads.Add(1)
					time.Sleep(50 * time.Millisecond) // the read
					return nil
				}, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// The stream of readers is flowing.
	eventually(t, 10*time.Second, func() bool { return reads.Load() > 50 }, "readers did not read")

	writer := newLocker(t, srv.Client(t)).RWMutex(key)
	start := time.Now()
	before := reads.Load()
	err := writer.WithWriteLock(ctx, func(context.Context) error {
		st, err := writer.Inspect(ctx)
		require.NoError(t, err)
		require.Empty(t, st.Readers, "readers beside the writer")
		return nil
	}, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	require.NoError(t, err, "the writer starved")
	waited := time.Since(start)
	t.Logf("the writer waited %v while %d reads ran", waited, reads.Load()-before)
	// It waits for the reads in progress (50ms), not for a moment when no
	// reader holds, which a stream of 16 overlapping readers rarely
	// leaves.
	require.Less(t, waited, 2*time.Second, "the writer waited too long for a stream of 50ms readers")
	after := reads.Load()
	eventually(t, 10*time.Second, func() bool { return reads.Load() > after+10 }, "readers did not resume after the writer")
}

// TestRWMutexReadersEnterTogether: readers queued behind a writer, in two
// Lockers, all hold the lock at once soon after the writer releases,
// without waiting out their retry delay.
func TestRWMutexReadersEnterTogether(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	writer, err := newLocker(t, srv.Client(t)).RWMutex(key).ObtainWrite(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	const perLocker = 4
	lockers := []*locksmith.Locker{newLocker(t, srv.Client(t)), newLocker(t, srv.Client(t))}
	var (
		entered sync.WaitGroup
		all     = make(chan struct{})
		results = make(chan error, 2*perLocker)
		last    atomic.Int64
	)
	entered.Add(2 * perLocker)
	for _, l := range lockers {
		m := l.RWMutex(key)
		for range perLocker {
			go func() {
				results <- m.WithReadLock(ctx, func(ctx context.Context) error {
					last.Store(time.Now().UnixNano())
					entered.Done()
					select {
					case <-all: // every reader holds at once
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
			}()
		}
	}
	for _, l := range lockers {
		eventually(t, 5*time.Second, func() bool { return locksmith.QueuedWaiters(l, plainNames(key).Channel) == perLocker },
			"the readers did not queue")
	}
	released := time.Now()
	require.NoError(t, writer.Release(ctx))
	allIn := make(chan struct{})
	go func() { entered.Wait(); close(allIn) }()
	select {
	case <-allIn:
	case <-time.After(10 * time.Second):
		cancel() // the readers that did get in give up; the rest return too
		t.Fatal("the readers did not all hold the lock at once after the writer released")
	}
	close(all)
	t.Logf("the last of %d readers entered %v after the writer released", 2*perLocker, time.Unix(0, last.Load()).Sub(released))
	require.Less(t, time.Unix(0, last.Load()).Sub(released), 5*time.Second)
	for range 2 * perLocker {
		require.NoError(t, <-results)
	}
}

// TestRWMutexExclusion mixes readers and writers from 3 Lockers and
// counts who is inside.
func TestRWMutexExclusion(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	key := uniqueKey(t)
	var (
		readers, writers, mostReaders atomic.Int64
		bad                           atomic.Int64
		done                          atomic.Int64
		wg                            sync.WaitGroup
		// lastEntry and longestGap: the longest stretch without an
		// entry, in nanoseconds since start.
		start                 = time.Now()
		lastEntry, longestGap atomic.Int64
	)
	entered := func() {
		now := int64(time.Since(start))
		if gap := now - lastEntry.Swap(now); gap > longestGap.Load() {
			longestGap.Store(gap)
		}
	}
	const lockers, workers, rounds = 3, 12, 5
	for range lockers {
		m := newLocker(t, srv.Client(t), locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond))).RWMutex(key)
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					var err error
					if (i+r)%5 == 0 {
						err = m.WithWriteLock(ctx, func(context.Context) error {
							entered()
							if writers.Add(1) != 1 || readers.Load() != 0 {
								bad.Add(1)
							}
							time.Sleep(time.Millisecond)
							writers.Add(-1)
							return nil
						})
					} else {
						err = m.WithReadLock(ctx, func(context.Context) error {
							entered()
							n := readers.Add(1)
							if writers.Load() != 0 {
								bad.Add(1)
							}
							for m := mostReaders.Load(); n > m && !mostReaders.CompareAndSwap(m, n); m = mostReaders.Load() {
							}
							time.Sleep(time.Millisecond)
							readers.Add(-1)
							return nil
						})
					}
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
	require.Zero(t, bad.Load(), "a writer beside readers or another writer")
	// Holds last about a millisecond and 36 goroutines want them: a
	// stretch of seconds without an entry is a stall (a writer's intent,
	// which lives 5s unless renewed, that nobody renewed), not noise.
	t.Logf("longest stretch without an entry: %v", time.Duration(longestGap.Load()))
	require.Less(t, time.Duration(longestGap.Load()), 2500*time.Millisecond, "the lock stalled")
	require.Greater(t, mostReaders.Load(), int64(1), "readers never shared the lock")
	require.Zero(t, srv.Client(t).Exists(ctx, key).Val(), "holds left behind")
}

func TestRWMutexCrashedHolders(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	raw := srv.Client(t)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	// A reader that keeps the key alive throughout, and a writer's intent
	// left by a process that died while waiting: it lapses by itself.
	live, err := m.ObtainRead(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	now, err := raw.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, raw.ZAdd(ctx, key, redis.Z{Score: -float64(now.Add(300 * time.Millisecond).UnixMilli()), Member: "q:dead-writer"}).Err())
	_, err = m.ObtainRead(ctx)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "the intent stops new readers")
	r, err := m.ObtainRead(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	require.NoError(t, err, "the dead writer's intent did not lapse")
	require.NoError(t, r.Release(ctx))
	require.NoError(t, live.Release(ctx))

	// A writer that crashed: its hold comes back after its TTL.
	crashed, err := m.ObtainWrite(ctx, locksmith.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	r, err = m.ObtainRead(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
	require.NoError(t, err, "the crashed writer's hold did not come back")
	require.ErrorIs(t, crashed.Release(ctx), locksmith.ErrNotHeld)
	require.NoError(t, r.Release(ctx))
}

func TestRWMutexCancelledWriterLeavesNothing(t *testing.T) {
	srv := redistest.Shared(t)
	key := uniqueKey(t)
	raw := srv.Client(t)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	reader, err := m.ObtainRead(t.Context(), locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() {
		_, err := newLocker(t, srv.Client(t)).RWMutex(key).ObtainWrite(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		got <- err
	}()
	eventually(t, 5*time.Second, func() bool {
		st, err := m.Inspect(t.Context())
		return err == nil && st.WaitingWriters == 1
	}, "the writer's intent")
	cancel()
	err = <-got
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	st, err := m.Inspect(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.WaitingWriters, "the intent of a writer that gave up")
	r, err := m.ObtainRead(t.Context())
	require.NoError(t, err, "readers enter again")
	require.NoError(t, r.Release(t.Context()))
	require.NoError(t, reader.Release(t.Context()))
	require.Zero(t, raw.Exists(t.Context(), key).Val())
}

func TestRWMutexLeaseAndLoss(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	raw := srv.Client(t)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	r, err := m.ObtainRead(ctx, locksmith.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	lctx := r.Lease(ctx)
	first := r.Deadline()
	eventually(t, 5*time.Second, func() bool { return r.Deadline().After(first) }, "the read hold was not renewed")
	second := r.Deadline()
	eventually(t, 5*time.Second, func() bool { return r.Deadline().After(second) }, "the read hold was not renewed again")
	require.NoError(t, lctx.Err())
	require.NoError(t, r.Release(ctx))

	err = m.WithWriteLock(ctx, func(ctx context.Context) error {
		require.EqualValues(t, 1, raw.Del(ctx, key).Val(), "take the hold away")
		<-ctx.Done()
		return nil
	}, locksmith.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, locksmith.ErrLockLost)
}

func TestRWMutexFencing(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	m := newLocker(t, srv.Client(t), locksmith.WithFencing()).RWMutex(key)
	var last int64
	for i := range 8 {
		var (
			h   *locksmith.Lock
			err error
		)
		if i%3 == 0 {
			h, err = m.ObtainWrite(ctx)
		} else {
			h, err = m.ObtainRead(ctx)
		}
		require.NoError(t, err)
		require.Greater(t, h.Fence(), last, "fencing tokens must increase across reads and writes")
		last = h.Fence()
		require.NoError(t, h.Release(ctx))
	}
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, last, st.Fence)
}

func TestRWMutexInvalidArguments(t *testing.T) {
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
		m    *locksmith.RWMutex
		opts []locksmith.Option
	}{
		{"empty key", l.RWMutex(""), nil},
		{"zero RWMutex", &locksmith.RWMutex{}, nil},
		{"nil RWMutex", nil, nil},
		{"replicas", l.RWMutex("k"), []locksmith.Option{locksmith.WithReplicas(1, time.Second)}},
		{"replicas on the Locker", newLocker(t, newClient(t, srv.Options(), []redis.Hook{sent}),
			locksmith.WithReplicas(1, time.Second)).RWMutex("k"), nil},
		{"bad TTL", l.RWMutex("k"), []locksmith.Option{locksmith.WithTTL(0)}},
		{"quorum", q.RWMutex("k"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent.reset()
			_, err := c.m.ObtainRead(t.Context(), c.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			_, err = c.m.ObtainWrite(t.Context(), c.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.ErrorIs(t, c.m.WithReadLock(t.Context(), noop, c.opts...), locksmith.ErrInvalidArgument)
			require.ErrorIs(t, c.m.WithWriteLock(t.Context(), noop, c.opts...), locksmith.ErrInvalidArgument)
			_, err = c.m.Inspect(t.Context(), c.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.Zero(t, sent.count(), "sent %v", sent.all())
		})
	}
	require.ErrorIs(t, l.RWMutex("k").WithReadLock(t.Context(), nil), locksmith.ErrInvalidArgument)
	require.ErrorIs(t, l.RWMutex("k").WithWriteLock(t.Context(), nil), locksmith.ErrInvalidArgument)
}

func TestRWMutexRedisDown(t *testing.T) {
	client := unreachableClient(t)
	m := newLocker(t, client).RWMutex("k")
	for _, opts := range [][]locksmith.Option{nil, {locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(10*time.Millisecond), 3))}} {
		for _, obtain := range []func(context.Context, ...locksmith.Option) (*locksmith.Lock, error){m.ObtainRead, m.ObtainWrite} {
			_, err := obtain(t.Context(), opts...)
			require.Error(t, err)
			require.NotErrorIs(t, err, locksmith.ErrNotObtained, "an outage reported as a held lock")
		}
	}
}

func TestRWMutexCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	m := newLocker(t, clusterClient(t, cl), locksmith.WithFencing()).RWMutex(key)
	w, err := m.ObtainWrite(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	readers := newLocker(t, clusterClient(t, cl)).RWMutex(key)
	got := make(chan obtained, 1)
	go func() {
		r, err := readers.ObtainRead(ctx, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		got <- obtained{lk: r, err: err, at: time.Now()}
	}()
	waitShardSubscribed(t, cl, plainNames(key).Channel, 1)
	released := time.Now()
	require.NoError(t, w.Release(ctx))
	r := <-got
	require.NoError(t, r.err)
	require.Less(t, r.at.Sub(released), 5*time.Second, "the reader did not hear the release (SPUBLISH)")
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Readers, 1)
	require.NoError(t, r.lk.Release(ctx))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// A name is one kind of lock: a semaphore's Acquire on a read-write
// lock's key, or a read or write on a semaphore's, fails with
// ErrWrongKind (not as a held lock) and changes nothing, even when it
// would wait; and each kind's Inspect refuses the other's set.
func TestRWMutexAndSemaphoreDoNotShareAName(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	l := newLocker(t, srv.Client(t), locksmith.WithFencing())
	waiting := locksmith.WithRetry(locksmith.LinearBackoff(10 * time.Millisecond))
	// refused checks that call fails with ErrWrongKind and leaves the
	// set's members and the fence counter of key as they were (a waiting
	// writer renews its intent's score meanwhile).
	refused := func(key, what string, call func() error) {
		t.Helper()
		keys, err := l.Keys(key)
		require.NoError(t, err)
		before := raw.ZRange(ctx, key, 0, -1).Val()
		fence := raw.Get(ctx, keys.Fence).Val()
		err = call()
		require.ErrorIs(t, err, locksmith.ErrWrongKind, what)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained, "%s: reported as a held lock", what)
		require.Equal(t, locksmith.ClassInvalid, locksmith.ClassOf(err))
		require.Equal(t, before, raw.ZRange(ctx, key, 0, -1).Val(), "%s changed the set", what)
		require.Equal(t, fence, raw.Get(ctx, keys.Fence).Val(), "%s took a fence", what)
	}

	// A semaphore with a permit held.
	key := uniqueKey(t)
	sem := l.Semaphore(key, 2)
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	m := l.RWMutex(key)
	for _, waits := range [][]locksmith.Option{nil, {waiting}} {
		refused(key, "a read", func() error { _, err := m.ObtainRead(ctx, waits...); return err })
		refused(key, "a write", func() error { _, err := m.ObtainWrite(ctx, waits...); return err })
	}
	refused(key, "WithReadLock", func() error {
		return m.WithReadLock(ctx, func(context.Context) error { t.Error("ran on a semaphore's key"); return nil })
	})
	_, err = m.Inspect(ctx)
	require.ErrorIs(t, err, locksmith.ErrWrongKind, "a semaphore read as a read-write lock")
	require.NoError(t, p.Release(ctx))

	// A read-write lock: a reader alone, then a writer with another
	// writer's intent. The semaphore is another Locker's: in the writer's
	// Locker, a waiting Acquire would queue behind the waiting writer,
	// which shares its name, and learn that it is a read-write lock's
	// only when its turn comes.
	key = uniqueKey(t) + "-rw"
	m, sem = l.RWMutex(key), newLocker(t, srv.Client(t), locksmith.WithFencing()).Semaphore(key, 10)
	r, err := m.ObtainRead(ctx)
	require.NoError(t, err)
	refused(key, "a permit beside a reader", func() error { _, err := sem.Acquire(ctx); return err })
	_, err = sem.Inspect(ctx)
	require.ErrorIs(t, err, locksmith.ErrWrongKind, "a read-write lock read as a semaphore")
	require.NoError(t, r.Release(ctx))
	wr, err := m.ObtainWrite(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	waiter := make(chan error, 1)
	go func() { _, err := m.ObtainWrite(wctx, waiting); waiter <- err }()
	require.Eventually(t, func() bool {
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		return st.WaitingWriters == 1
	}, 5*time.Second, time.Millisecond, "the second writer left no intent")
	for _, waits := range [][]locksmith.Option{nil, {waiting}} {
		refused(key, "a permit beside a writer", func() error { _, err := sem.Acquire(ctx, waits...); return err })
	}
	refused(key, "WithPermit", func() error {
		return sem.WithPermit(ctx, func(context.Context) error { t.Error("ran on a read-write lock's key"); return nil })
	})
	cancel()
	require.ErrorIs(t, <-waiter, locksmith.ErrNotObtained)
	require.NoError(t, wr.Release(ctx))
}

func TestRWMutexBudgetIsTheDelays(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	key := uniqueKey(t)
	w, err := newLocker(t, srv.Client(t)).RWMutex(key).ObtainWrite(ctx, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	m := newLocker(t, srv.Client(t)).RWMutex(key)
	const d, n = 20 * time.Millisecond, 5
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obtain := m.ObtainRead
			if i%2 == 0 {
				obtain = m.ObtainWrite
			}
			start := time.Now()
			_, err := obtain(ctx, locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(d), n)))
			if !errors.Is(err, locksmith.ErrNotObtained) {
				t.Errorf("obtain = %v, want ErrNotObtained", err)
			}
			if waited := time.Since(start); waited < n*d-d/2 {
				t.Errorf("gave up after %v, before its %d delays of %v", waited, n, d)
			}
		}()
	}
	wg.Wait()
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Zero(t, st.WaitingWriters, "writers that gave up left their intents")
	require.NoError(t, w.Release(ctx))
	require.Zero(t, srv.Client(t).Exists(ctx, key).Val())
}

// Each kind's Inspect refuses the other kind's key with ErrWrongKind in
// every state it can be in, and reads a key that holds nothing as free.
func TestInspectRefusesTheOtherKind(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	l, other := newLocker(t, srv.Client(t)), newLocker(t, srv.Client(t))
	waiting := locksmith.WithRetry(locksmith.LinearBackoff(10 * time.Millisecond))
	// waitBehind starts take in the background, waiting, and returns once
	// queued says it waits; stop cancels it and returns what it got.
	waitBehind := func(what string, take func(ctx context.Context) (*locksmith.Lock, error), queued func() bool) (stop func() obtained) {
		t.Helper()
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan obtained, 1)
		go func() { lk, err := take(wctx); got <- obtained{lk: lk, err: err} }()
		require.Eventually(t, queued, 5*time.Second, time.Millisecond, "%s: not waiting", what)
		return func() obtained { cancel(); return receive(t, got, what) }
	}

	// A read-write lock, read as a semaphore.
	key := uniqueKey(t)
	m, sem := l.RWMutex(key), other.Semaphore(key, 3)
	free := func(what string) {
		t.Helper()
		st, err := sem.Inspect(ctx)
		require.NoError(t, err, what)
		require.Empty(t, st.Holders, what)
		rw, err := m.Inspect(ctx)
		require.NoError(t, err, what)
		require.Empty(t, rw.Readers, what)
		require.Nil(t, rw.Writer, what)
	}
	asSemaphore := func(what string) {
		t.Helper()
		_, err := sem.Inspect(ctx)
		require.ErrorIs(t, err, locksmith.ErrWrongKind, "%s, read as a semaphore", what)
	}
	intents := func(n int) func() bool {
		return func() bool { st, err := m.Inspect(ctx); return err == nil && st.WaitingWriters == n }
	}
	free("nothing held yet")
	r, err := m.ObtainRead(ctx)
	require.NoError(t, err)
	asSemaphore("read-held")
	writer := waitBehind("a writer behind the reader", func(ctx context.Context) (*locksmith.Lock, error) {
		return m.ObtainWrite(ctx, waiting)
	}, intents(1))
	asSemaphore("read-held, with a writer's intent")
	require.NoError(t, r.Release(ctx))
	require.Eventually(t, func() bool { st, err := m.Inspect(ctx); return err == nil && st.Writer != nil }, 5*time.Second,
		time.Millisecond, "the waiting writer did not get the lock")
	asSemaphore("write-held")
	second := waitBehind("a second writer", func(ctx context.Context) (*locksmith.Lock, error) {
		return other.RWMutex(key).ObtainWrite(ctx, waiting)
	}, intents(1))
	asSemaphore("write-held, with a writer's intent")
	require.ErrorIs(t, second().err, locksmith.ErrNotObtained)
	w := writer()
	require.NoError(t, w.err)
	require.NoError(t, w.lk.Release(ctx))
	free("released")

	// A semaphore, read as a read-write lock.
	key = uniqueKey(t)
	sem, m = l.Semaphore(key, 1), other.RWMutex(key)
	asRW := func(what string) {
		t.Helper()
		_, err := m.Inspect(ctx)
		require.ErrorIs(t, err, locksmith.ErrWrongKind, "%s, read as a read-write lock", what)
	}
	free("nothing held yet")
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	asRW("a permit held")
	queuedFor := other.Semaphore(key, 1)
	waiter := waitBehind("a waiter for a permit", func(ctx context.Context) (*locksmith.Lock, error) {
		return queuedFor.Acquire(ctx, waiting)
	}, func() bool { st, err := sem.Inspect(ctx); return err == nil && st.Queued == 1 })
	asRW("every permit held, with a waiter queued")
	require.ErrorIs(t, waiter().err, locksmith.ErrNotObtained)
	require.NoError(t, p.Release(ctx))
	free("released")
}
