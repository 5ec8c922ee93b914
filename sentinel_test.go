package locksmith_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The tests in this file run on a real Sentinel deployment (a master, a
// replica, three sentinels), started once per package
// (redistest.SharedSentinel), through go-redis failover clients.

func TestSentinelLocks(t *testing.T) {
	s := redistest.SharedSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("contention", func(t *testing.T) {
		lockers := []*locksmith.Locker{
			newLocker(t, s.Client(t), locksmith.WithFencing()),
			newLocker(t, s.Client(t)),
		}
		n, overlaps := contend(t, ctx, lockers, uniqueKey(t), 2, 5, time.Millisecond, locksmith.LinearBackoff(20*time.Millisecond))
		require.Zero(t, overlaps)
		require.Equal(t, int64(20), n)
	})

	t.Run("lease detects loss", func(t *testing.T) {
		key := uniqueKey(t)
		lk, err := newLocker(t, s.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(50*time.Millisecond))
		require.NoError(t, err)
		lease := lk.Lease(ctx)
		require.NoError(t, s.Client(t).Del(ctx, key).Err())
		select {
		case <-lease.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the lease did not notice the lock was deleted")
		}
		require.ErrorIs(t, context.Cause(lease), locksmith.ErrLockLost)
	})

	t.Run("waiter woken by release", func(t *testing.T) {
		attempts := &scripts{}
		wc := s.Client(t)
		wc.AddHook(attempts)
		waiter := checked(t, newLocker(t, wc), &attempts.n)
		raw := s.Client(t)
		requireWokenByRelease(t, newLocker(t, s.Client(t)), waiter, attempts,
			func(ch string) { waitSubscribed(t, raw, ch, 1) }, uniqueKey(t))
	})

	t.Run("replicated", func(t *testing.T) {
		lk, err := newLocker(t, s.Client(t)).Obtain(ctx, uniqueKey(t), locksmith.WithReplicas(1, time.Second))
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	})

	t.Run("semaphore", func(t *testing.T) {
		key := uniqueKey(t)
		sem := newLocker(t, s.Client(t), locksmith.WithFencing()).Semaphore(key, 1)
		p, err := sem.Acquire(ctx, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			got <- newLocker(t, s.Client(t)).Semaphore(key, 1).WithPermit(ctx, func(context.Context) error { return nil },
				locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		}()
		waitSubscribed(t, s.Client(t), plainNames(key).Channel, 1)
		require.NoError(t, p.Release(ctx))
		require.NoError(t, <-got, "the waiter did not hear the release")
	})

	t.Run("read-write lock", func(t *testing.T) {
		key := uniqueKey(t)
		m := newLocker(t, s.Client(t)).RWMutex(key)
		r, err := m.ObtainRead(ctx, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			got <- newLocker(t, s.Client(t)).RWMutex(key).WithWriteLock(ctx, func(context.Context) error { return nil },
				locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
		}()
		eventually(t, 5*time.Second, func() bool {
			st, err := m.Inspect(ctx)
			return err == nil && st.WaitingWriters == 1
		}, "the writer's intent")
		require.NoError(t, r.Release(ctx))
		require.NoError(t, <-got, "the writer did not hear the release")
	})
}

// TestSentinelFailover kills the master while locks are held and lets the
// sentinels promote the replica. Replication is asynchronous, so what
// survives depends on what the replica had received:
//
//   - A lock obtained WithReplicas(1, ...) was acknowledged by the replica
//     before Obtain returned: it survives on the promoted replica, its
//     lease goes on renewing it there, and nobody else can obtain it.
//   - A lock obtained with plain settings may or may not have reached the
//     replica. Here the replica is kept from receiving it until the master
//     is dead, so it almost surely did not: the promoted replica grants it
//     a second time, well before the first holder's Deadline. The first
//     holder's lease finds the lock gone at its first renewal on the new
//     master and ends with ErrLockLost; until then it acts as the owner.
//     Its fencing token is lower than the second holder's, so a resource
//     that checks tokens rejects its writes once the second holder has
//     written.
func TestSentinelFailover(t *testing.T) {
	s := redistest.SharedSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	require.NoError(t, s.WaitHealthy(ctx))
	master, err := s.Master(ctx)
	require.NoError(t, err)
	replica, err := s.Replica(ctx)
	require.NoError(t, err)

	// The TTL outlasts the failover (a few seconds), so that a lock the
	// promoted replica holds can be renewed there in time; renewals are
	// frequent, so that a lock it lacks is found lost soon after.
	opts := []locksmith.Option{locksmith.WithTTL(15 * time.Second), locksmith.WithRenewInterval(250 * time.Millisecond), locksmith.WithFencing()}
	holders := newLocker(t, s.Client(t), opts...)

	replicatedKey, plainKey := uniqueKey(t), uniqueKey(t)
	replicated, err := holders.Obtain(ctx, replicatedKey, locksmith.WithReplicas(1, time.Second))
	require.NoError(t, err)
	replicatedLease := replicated.Lease(ctx)
	// An election through the failover: its leader's term is replicated
	// (WithReplicas), a candidate waits with Run, an observer watches.
	after := electionThroughFailover(t, ctx, s, opts)

	// Keep the replica from receiving what comes next until the master
	// is dead, as a lagging or cut-off replica would.
	awake, err := s.StallReplica(ctx, 500*time.Millisecond)
	require.NoError(t, err)
	plain, err := holders.Obtain(ctx, plainKey)
	require.NoError(t, err)
	plainLease := plain.Lease(ctx)

	_, took, err := s.KillMaster(ctx)
	require.NoError(t, err)
	require.NoError(t, awake())
	t.Logf("master %s killed; the sentinels promoted %s after %v", master.Addr, replica.Addr, took)

	// The promoted replica has what it had received before the kill.
	promoted := replica.Client(t)
	had := func(key string) bool { return promoted.Exists(ctx, key).Val() == 1 }
	t.Logf("the promoted replica had the replicated lock: %v, the plain lock: %v", had(replicatedKey), had(plainKey))
	others := newLocker(t, s.Client(t), opts...)

	// Guaranteed: the replicated lock survived, and its lease with it.
	_, err = others.Obtain(ctx, replicatedKey)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a lock acknowledged by the replica must survive its promotion")
	// A couple of renewals on the new master: its Deadline moves.
	for range 2 {
		before := replicated.Deadline()
		eventually(t, 5*time.Second, func() bool { return replicated.Deadline().After(before) },
			"the replicated lock was not renewed on the new master")
	}
	ttl, err := replicated.TTL(ctx)
	require.NoError(t, err, "the replicated lock must still be held")
	require.NoError(t, replicatedLease.Err())
	t.Logf("replicated lock: still held on the promoted replica (TTL %v), lease alive", ttl)

	// Not guaranteed: the plain lock.
	store := &fencedStore{}
	second, err := others.Obtain(ctx, plainKey)
	switch {
	case err == nil:
		t.Logf("plain lock: the promoted replica had not received it and GRANTED IT AGAIN (fences %d, then %d); "+
			"the first holder's Deadline was %v away, and its lease had noticed the loss: %v",
			plain.Fence(), second.Fence(), time.Until(plain.Deadline()).Round(time.Millisecond), plainLease.Err() != nil)
		// The fence counter was lost with the lock, but tokens also
		// follow the server's clock (here, the same machine's).
		require.Greater(t, second.Fence(), plain.Fence())
		// The first holder learns of it at its next renewal.
		select {
		case <-plainLease.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the first holder's lease did not end after its lock vanished")
		}
		require.ErrorIs(t, context.Cause(plainLease), locksmith.ErrLockLost)
		// Fencing protects a resource that checks tokens: once the
		// second holder wrote, the first holder's writes are rejected.
		require.NoError(t, store.Write(second.Fence(), "second"))
		require.ErrorIs(t, store.Write(plain.Fence(), "first"), errStaleFence)
		require.NoError(t, second.Release(ctx))
	case errors.Is(err, locksmith.ErrNotObtained):
		t.Logf("plain lock: the replica had received it before the kill, and it survived")
		require.NoError(t, plainLease.Err())
		require.NoError(t, plain.Release(ctx))
	default:
		t.Fatalf("second Obtain of the plain lock: %v", err)
	}

	after()

	// The replicated lock ends normally; the next holder's fence is
	// higher, so writes with the old one are rejected.
	store = &fencedStore{}
	require.NoError(t, store.Write(replicated.Fence(), "replicated"))
	require.NoError(t, replicated.Release(ctx))
	next, err := others.Obtain(ctx, replicatedKey)
	require.NoError(t, err)
	require.Greater(t, next.Fence(), replicated.Fence())
	require.NoError(t, store.Write(next.Fence(), "next"))
	require.ErrorIs(t, store.Write(replicated.Fence(), "late"), errStaleFence)
	require.NoError(t, next.Release(ctx))
}

// electionThroughFailover starts an election whose leader's term was
// acknowledged by the replica before the failover that the caller then
// causes, with a candidate waiting in Run and an observer; the function it
// returns, called after the failover, checks that the term survived on
// the promoted replica, and that its resignation makes the candidate
// leader, with a higher fence, as the observer sees.
func electionThroughFailover(t *testing.T, ctx context.Context, s *redistest.Sentinel, opts []locksmith.Option) func() {
	t.Helper()
	name := uniqueKey(t)
	leader, err := newLocker(t, s.Client(t), opts...).Election(name, locksmith.WithReplicas(1, time.Second)).Campaign(ctx, "a")
	require.NoError(t, err)
	changes, err := newLocker(t, s.Client(t)).Election(name).Observe(ctx)
	require.NoError(t, err)
	nextLeader(t, changes, "a", func(l locksmith.Leader) bool { return l.Value == "a" })

	rctx, stop := context.WithCancel(ctx)
	led := make(chan int64, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- newLocker(t, s.Client(t), opts...).Election(name, locksmith.WithRetry(locksmith.LinearBackoff(100*time.Millisecond))).
			Run(rctx, "b", func(ctx context.Context, term *locksmith.Term) error {
				led <- term.Fence()
				<-ctx.Done()
				return nil
			})
	}()
	return func() {
		t.Helper()
		defer func() {
			stop()
			require.ErrorIs(t, <-ran, context.Canceled)
		}()
		// The term was acknowledged by the replica: it is renewed on the
		// promoted one, and nobody else leads meanwhile.
		for range 2 {
			before := leader.Deadline()
			eventually(t, 5*time.Second, func() bool { return leader.Deadline().After(before) },
				"the leader's term was not renewed on the new master")
		}
		require.NoError(t, leader.Context().Err(), "the replicated term survives the failover")
		select {
		case f := <-led:
			t.Fatalf("the candidate led (fence %d) while the replicated term lasted", f)
		default:
		}
		require.NoError(t, leader.Resign(ctx))
		select {
		case f := <-led:
			require.Greater(t, f, leader.Fence())
		case <-time.After(10 * time.Second):
			t.Fatal("the candidate did not lead after the resignation")
		}
		nextLeader(t, changes, "b after the failover", func(l locksmith.Leader) bool { return l.Value == "b" })
	}
}
