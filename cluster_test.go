package locksmith_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The tests in this file run on a real Redis Cluster of 3 masters with a
// replica each, started once per package (redistest.SharedCluster), through
// go-redis cluster clients.

// clusterKeys returns keys for a test on cl, all new: one without a hash
// tag on each master, two that share a hash tag (and so a slot), and one
// with a '}' but no hash tag, whose companion keys get a forced suffix.
func clusterKeys(t *testing.T, cl *redistest.Cluster) []string {
	t.Helper()
	base := uniqueKey(t)
	keys := keyOnEachMaster(t, cl, base)
	return append(keys, "{"+base+"}:a", "{"+base+"}:b", base+"}x")
}

// keyOnEachMaster returns, for each master of cl, a key without a hash tag
// that starts with base and that the master serves.
func keyOnEachMaster(t *testing.T, cl *redistest.Cluster, base string) []string {
	t.Helper()
	ctx := t.Context()
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	keys := make([]string, len(masters))
	found := 0
	for i := 0; found < len(masters); i++ {
		require.Less(t, i, 1000, "no key on every master")
		key := base + ":" + strconv.Itoa(i)
		owner, err := cl.KeyOwner(ctx, key)
		require.NoError(t, err)
		for j, m := range masters {
			if m == owner && keys[j] == "" {
				keys[j] = key
				found++
			}
		}
	}
	return keys
}

func TestClusterContention(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// One Locker with fencing, one without: the first runs scripts over
	// two keys of one slot.
	lockers := []*locksmith.Locker{
		newLocker(t, cl.Client(t), locksmith.WithFencing()),
		newLocker(t, cl.Client(t)),
	}
	const perLocker, rounds = 2, 5
	keys := clusterKeys(t, cl)
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, overlaps := contend(t, ctx, lockers, key, perLocker, rounds, time.Millisecond,
				locksmith.LinearBackoff(20*time.Millisecond))
			if overlaps != 0 || n != int64(len(lockers)*perLocker*rounds) {
				t.Errorf("key %q: %d acquisitions, %d overlapping; want %d, none", key, n, overlaps, len(lockers)*perLocker*rounds)
			}
		}()
	}
	wg.Wait()
}

func TestClusterLeaseDetectsLoss(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	raw := cl.Client(t)
	l := newLocker(t, cl.Client(t), locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(50*time.Millisecond))
	for _, key := range clusterKeys(t, cl) {
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err, "key %q", key)
		lease := lk.Lease(ctx)
		require.NoError(t, raw.Del(ctx, key).Err())
		select {
		case <-lease.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("key %q: the lease did not notice the lock was deleted", key)
		}
		require.ErrorIs(t, context.Cause(lease), locksmith.ErrLockLost, "key %q", key)
		require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld, "key %q", key)
	}
}

// TestClusterFencingAndOnceInAnySlot runs fencing and Once on keys in
// slots of every master, with and without hash tags, and with a '}' but
// no tag: every script's keys must share a slot, or the cluster refuses
// it (CROSSSLOT).
func TestClusterFencingAndOnceInAnySlot(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	prefix := uniqueKey(t) + ":"
	l := newLocker(t, cl.Client(t), locksmith.WithPrefix(prefix), locksmith.WithFencing())
	keys := slices.Clone(braceKeys)
	for _, k := range keyOnEachMaster(t, cl, prefix+"job") {
		keys = append(keys, strings.TrimPrefix(k, prefix))
	}
	masters := map[string]bool{}
	for _, key := range keys {
		owner, err := cl.KeyOwner(ctx, prefix+key)
		require.NoError(t, err)
		masters[owner.Addr] = true

		var last int64
		for range 2 {
			lk, err := l.Obtain(ctx, key)
			require.NoError(t, err, "key %q", key)
			require.Greater(t, lk.Fence(), last, "key %q: fences must increase", key)
			last = lk.Fence()
			require.NoError(t, lk.Release(ctx), "key %q", key)
		}
		requireOnceRunsOnce(t, l, key)
	}
	require.Len(t, masters, 3, "the keys must reach every master")
}

// braceKeys are lock keys with and without a hash tag; the last four have
// no tag but a '}', so no tag can name their slot: their companion keys get
// a suffix forced into it.
var braceKeys = []string{"report:2026-11-30", "{order:42}:ship", "a{b", "{{a}}", "x{y}z{w}", "{", "a}b", "a{}b", "x}{y", "}"}

// requireOnceRunsOnce runs a job twice on key with l.Once, and checks that
// it ran once and left a completion record.
func requireOnceRunsOnce(t *testing.T, l *locksmith.Locker, key string) {
	t.Helper()
	ctx := t.Context()
	var calls int
	for range 2 {
		_, err := l.Once(ctx, key, func(context.Context) error { calls++; return nil })
		require.NoError(t, err, "key %q", key)
	}
	require.Equal(t, 1, calls, "key %q", key)
	_, ok, err := l.Completed(ctx, key)
	require.NoError(t, err, "key %q", key)
	require.True(t, ok, "key %q", key)
}

// TestClusterWaitersWokenByRelease has one Locker wait for locks on every
// master at once; each waiter is woken by its lock's release, not by its
// retry strategy (an hour) or the holder's TTL (a minute).
func TestClusterWaitersWokenByRelease(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	keys := clusterKeys(t, cl)
	holders := newLocker(t, cl.Client(t), locksmith.WithTTL(time.Minute))
	held := make([]*locksmith.Lock, len(keys))
	for i, key := range keys {
		var err error
		held[i], err = holders.Obtain(ctx, key)
		require.NoError(t, err)
	}
	attempts := &scripts{}
	waiters := checked(t, newLocker(t, clusterClient(t, cl, attempts)), &attempts.n)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := make(chan error, len(keys))
	for _, key := range keys {
		go func() {
			lk, err := waiters.Obtain(wctx, key, locksmith.WithRetry(forever))
			if err == nil {
				err = lk.Release(ctx)
			}
			errs <- err
		}()
	}
	// Every waiter is asleep: subscribed, and past its first attempt
	// and the one that follows its subscription's confirmation.
	for _, key := range keys {
		waitShardSubscribed(t, cl, plainNames(key).Channel, 1)
	}
	attempts.wait(t, int64(2*len(keys)))
	start := time.Now()
	for _, lk := range held {
		require.NoError(t, lk.Release(ctx))
	}
	for _, key := range keys {
		require.NoError(t, <-errs, "a waiter (keys %q)", key)
	}
	took := time.Since(start)
	t.Logf("%d waiters on %d masters served %v after the releases", len(keys), 3, took)
	require.Less(t, took, wakeBound, "the waiters were not woken by the releases")
}

// TestClusterReleaseAnnouncedBySPublish checks that releases are
// announced with sharded pub/sub, which stays within the shard that
// serves the lock's slot, and not with PUBLISH, which the cluster
// broadcasts to every node.
func TestClusterReleaseAnnouncedBySPublish(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	for _, m := range masters {
		require.NoError(t, m.Client(t).ConfigResetStat(ctx).Err())
	}
	l := newLocker(t, cl.Client(t))
	for _, key := range clusterKeys(t, cl) {
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}
	for _, m := range masters {
		stats := commandStats(t, m.Client(t))
		require.Positive(t, stats["spublish"], "master %s: releases announced without SPUBLISH", m.Addr)
		require.Zero(t, stats["publish"], "master %s: releases announced with PUBLISH, broadcast to every node", m.Addr)
	}
}

// commandStats returns how many times the server ran each command, from
// INFO commandstats.
func commandStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, "line %q", line)
		stats[name] = n
	}
	return stats
}

// slotOf returns the slot of key in cl, and the master that serves it.
func slotOf(t *testing.T, cl *redistest.Cluster, key string) (int, *redistest.Server) {
	t.Helper()
	slot, err := cl.Keyslot(t.Context(), key)
	require.NoError(t, err)
	owner, err := cl.SlotOwner(t.Context(), slot)
	require.NoError(t, err)
	return slot, owner
}

// otherMaster returns a master of cl other than m.
func otherMaster(t *testing.T, cl *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	masters, err := cl.Masters(t.Context())
	require.NoError(t, err)
	if masters[0] != m {
		return masters[0]
	}
	return masters[1]
}

// TestClusterLiveResharding moves a slot that holds locks to another
// master while the cluster serves it: holders renew through ASK and then
// MOVED redirections, waiters wait, and others contend. No lock may be
// held twice, no lease lost; Release works after.
func TestClusterLiveResharding(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// All in one slot: keyA is the slot's key without a hash tag, the
	// others carry keyA as their tag.
	keyA := uniqueKey(t)
	keyB, keyC := "{"+keyA+"}:b", "{"+keyA+"}:c"
	slot, from := slotOf(t, cl, keyA)
	to := otherMaster(t, cl, from)
	newLocker := func() *locksmith.Locker { return newLocker(t, cl.Client(t)) }

	// Holders with a TTL of 1s, shorter than the migration's ASK phase:
	// their locks outlive the migration only if renewals get through.
	holders := newLocker()
	a, err := holders.Obtain(ctx, keyA, locksmith.WithTTL(time.Second))
	require.NoError(t, err)
	b, err := holders.Obtain(ctx, keyB, locksmith.WithTTL(time.Second), locksmith.WithFencing())
	require.NoError(t, err)
	leaseA, leaseB := a.Lease(ctx), b.Lease(ctx)

	// Waiters queued behind them for the whole migration. (Whether a
	// release announcement still reaches a waiter after its slot moved is
	// TestClusterWaiterWokenAfterSlotMoved's matter: these also retry.)
	waiters := newLocker()
	type obtained struct {
		lk  *locksmith.Lock
		err error
	}
	waitFor := func(key string, opts ...locksmith.Option) <-chan obtained {
		ch := make(chan obtained, 1)
		go func() {
			opts = append(opts, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
			lk, err := waiters.Obtain(ctx, key, opts...)
			ch <- obtained{lk, err}
		}()
		return ch
	}
	gotA, gotB := waitFor(keyA), waitFor(keyB, locksmith.WithFencing())

	// Contention on keyC, in rounds, until the migration is over.
	migrated := make(chan struct{})
	contention := make(chan [3]int64, 1)
	go func() {
		var total [3]int64 // acquisitions, overlaps, rounds
		lockers := []*locksmith.Locker{newLocker(), newLocker()}
		for {
			n, overlaps := contend(t, ctx, lockers, keyC, 2, 2, 2*time.Millisecond, locksmith.LinearBackoff(20*time.Millisecond))
			total[0] += n
			total[1] += overlaps
			total[2]++
			select {
			case <-migrated:
				contention <- total
				return
			default:
			}
		}
	}()

	// The waiters are subscribed and queued for handoffs.
	for _, key := range []string{keyA, keyB} {
		waitShardSubscribed(t, cl, plainNames(key).Channel, 1)
		eventually(t, 5*time.Second, func() bool {
			return cl.Client(t).Exists(ctx, plainNames(key).Queue).Val() == 1
		}, "the waiter for %q queued", key)
	}
	start := time.Now()
	err = cl.MigrateSlot(ctx, slot, to, 1500*time.Millisecond)
	close(migrated)
	// Wait for the contention, which reports to t, before anything can end
	// the test.
	total := <-contention
	require.NoError(t, err)
	t.Logf("slot %d moved from %s to %s in %v", slot, from.Addr, to.Addr, time.Since(start))
	t.Logf("contention on %q during the migration: %d acquisitions in %d rounds", keyC, total[0], total[2])
	require.Zero(t, total[1], "locks held twice during the migration")

	// The keys live on the new owner now.
	onTo := to.Client(t)
	require.Equal(t, a.Token(), onTo.Get(ctx, keyA).Val())
	require.Equal(t, b.Token(), onTo.Get(ctx, keyB).Val())
	// The locks, with a TTL of 1s, were renewed through the 1.5s in which
	// only ASK redirections reached them, and are still held.
	require.NoError(t, leaseA.Err(), "lease of %q", keyA)
	require.NoError(t, leaseB.Err(), "lease of %q", keyB)
	_, err = a.TTL(ctx)
	require.NoError(t, err)

	for _, tc := range []struct {
		lk  *locksmith.Lock
		got <-chan obtained
	}{{a, gotA}, {b, gotB}} {
		released := time.Now()
		require.NoError(t, tc.lk.Release(ctx), "Release %q", tc.lk.Key())
		var res obtained
		select {
		case res = <-tc.got:
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiter for %q was not served within 5s of the release", tc.lk.Key())
		}
		require.NoError(t, res.err, "waiter for %q", tc.lk.Key())
		t.Logf("waiter for %q served %v after the release", tc.lk.Key(), time.Since(released))
		if tc.lk == b {
			require.Greater(t, res.lk.Fence(), b.Fence())
		}
		require.NoError(t, res.lk.Release(ctx))
	}
	require.NotErrorIs(t, context.Cause(leaseA), locksmith.ErrLockLost)
	require.NotErrorIs(t, context.Cause(leaseB), locksmith.ErrLockLost)
}

// TestClusterWaiterWokenAfterSlotMoved has a waiter subscribe to a lock's
// release announcements, moves the lock's slot to another master, and
// releases the lock there: the announcement, now published by the new
// owner, must still wake the waiter, whose retry strategy (an hour) and
// holder's TTL (a minute) cannot.
func TestClusterWaiterWokenAfterSlotMoved(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := uniqueKey(t)
	slot, from := slotOf(t, cl, key)
	holder, err := newLocker(t, cl.Client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	attempts := &scripts{}
	waiter := checked(t, newLocker(t, clusterClient(t, cl, attempts)), &attempts.n)
	wctx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	got := obtainInBackground(wctx, waiter, nil, key, locksmith.WithRetry(forever))
	channel := plainNames(key).Channel
	waitShardSubscribed(t, cl, channel, 1)
	attempts.wait(t, 2) // asleep: past the attempt after the confirmation
	to := otherMaster(t, cl, from)
	require.NoError(t, cl.MigrateSlot(ctx, slot, to, 0))
	// Subscribed again, on the new owner, and past the attempt that
	// follows that confirmation.
	waitShardSubscribed(t, cl, channel, 1)
	attempts.wait(t, 3)
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	r := receive(t, got, "the waiter after its slot moved")
	require.NoError(t, r.err)
	require.NoError(t, r.lk.Release(ctx))
	require.Less(t, r.at.Sub(released), wakeBound, "the waiter was not woken by the release after its slot moved")
}

// TestClusterWithReplicasWaitsForTheLocksOwnReplica makes one master's
// only replica sleep, while the other replicas stay awake, and obtains a
// lock on that master WithReplicas(1, ...): it must fail with
// ErrNotReplicated every time. WAIT counts the acknowledgements of the
// writes made on its own connection, so it must reach the master that
// took the lock, on the connection that took it; a WAIT sent to another
// master reports that master's replica, which never saw the lock.
func TestClusterWithReplicasWaitsForTheLocksOwnReplica(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := uniqueKey(t)
	owner, err := cl.KeyOwner(ctx, key)
	require.NoError(t, err)
	replicas, err := cl.ReplicasOf(ctx, owner)
	require.NoError(t, err)
	require.Len(t, replicas, 1, "replicas of %s", owner.Addr)
	l := newLocker(t, cl.Client(t), locksmith.WithTTL(10*time.Second))
	warmUp(t, l)

	sleeper := replicas[0].Client(t)
	asleep := make(chan error, 1)
	go func() { asleep <- sleeper.Do(context.WithoutCancel(ctx), "debug", "sleep", 1).Err() }()
	awake := sync.OnceValue(func() error { return <-asleep })
	defer awake() // leave no replica asleep for the next test, even on failure
	waitAsleep(t, replicas[0])
	// A few times in a row, as a client may pick the node for a keyless
	// command in turn.
	for range 3 {
		_, err := l.Obtain(ctx, key, locksmith.WithReplicas(1, 100*time.Millisecond))
		require.ErrorIs(t, err, locksmith.ErrNotReplicated,
			"the only replica of %q's master is asleep, yet the lock was reported replicated", key)
	}
	require.NoError(t, awake())
	lk, err := l.Obtain(ctx, key, locksmith.WithReplicas(1, 2*time.Second))
	require.NoError(t, err, "replica awake")
	require.NoError(t, lk.Release(ctx))
}

// TestClusterMultiKeyScriptsDuringMigration shows what a script over two
// keys of one slot (a fenced acquire, the end of Once) meets while the
// slot is half migrated: Redis answers TRYAGAIN to a multi-key command
// unless all its keys are on one side, and go-redis retries TRYAGAIN only
// a few times, within some tens of milliseconds. What must hold is that
// such a failure is reported as an error, never as the lock being held
// elsewhere, and leaves no lock behind.
func TestClusterMultiKeyScriptsDuringMigration(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base := uniqueKey(t)
	slot, from := slotOf(t, cl, base)
	to := otherMaster(t, cl, from)
	l := newLocker(t, cl.Client(t), locksmith.WithFencing())
	// A first acquisition creates the fence counter, so that the slot
	// holds a key to migrate and the next acquire touches a key that
	// moved and one (the lock) that exists nowhere.
	lk, err := l.Obtain(ctx, base)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	done := make(chan error, 1)
	go func() { done <- cl.MigrateSlot(ctx, slot, to, time.Second) }()
	// Into the ASK phase: the fence counter has moved, and the slot is
	// not yet the new owner's.
	eventually(t, 5*time.Second, func() bool {
		return from.Client(t).ClusterCountKeysInSlot(ctx, slot).Val() == 0
	}, "the keys of slot %d moved", slot)

	lk, err = l.Obtain(ctx, base)
	switch {
	case err == nil:
		t.Logf("fenced Obtain during the migration: obtained, fence %d", lk.Fence())
		require.NoError(t, lk.Release(ctx))
	default:
		t.Logf("fenced Obtain during the migration: %v", err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	}
	// Once without fencing takes its lock with a one-key script; its last
	// step writes the completion record, a key that exists nowhere yet,
	// and deletes the lock.
	once := newLocker(t, cl.Client(t), locksmith.WithTTL(time.Second))
	onceKey := "{" + base + "}:once"
	ran, err := once.Once(ctx, onceKey, func(context.Context) error { return nil })
	t.Logf("Once during the migration: ran %v, err %v", ran, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	require.NoError(t, <-done)

	raw := cl.Client(t)
	require.Zero(t, raw.Exists(ctx, base).Val(), "a lock was left behind")
	// With the slot settled, both work (Once waits for a lock its failed
	// attempt may have left, for at most its TTL).
	lk, err = l.Obtain(ctx, base)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	_, err = once.Once(ctx, onceKey, func(context.Context) error { return nil },
		locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	require.NoError(t, err)
}

// TestClusterOneSubscriptionPerShard: a Locker waiting on keys of every
// shard holds one pub/sub connection per master, not one per key.
func TestClusterOneSubscriptionPerShard(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	holder := newLocker(t, cl.Client(t))
	opt := cl.Options()
	opt.ClientName = strings.ReplaceAll(uniqueKey(t), ":", "-")
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	waiter := newLocker(t, cc, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))

	const keys = 24
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	owners := make(map[string]bool)
	for i := range keys {
		key := fmt.Sprintf("%s:%d", uniqueKey(t), i)
		lk, err := holder.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = lk.Release(context.Background()) })
		owner, err := cl.KeyOwner(ctx, key)
		require.NoError(t, err)
		owners[owner.Addr] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = waiter.Obtain(wctx, key)
		}()
		k, err := waiter.Keys(key)
		require.NoError(t, err)
		waitShardSubscribed(t, cl, k.Channel, 1)
	}
	require.Len(t, owners, 3, "the keys do not cover every shard: the test shows nothing")
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	total := 0
	for _, m := range masters {
		list, err := m.Client(t).ClientList(ctx).Result()
		require.NoError(t, err)
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, "name="+opt.ClientName+" ") && strings.Contains(line, "ssub=") && !strings.Contains(line, "ssub=0") {
				n++
			}
		}
		require.LessOrEqual(t, n, 1, "master %s: %d pub/sub connections of one Locker", m.Addr, n)
		total += n
	}
	require.Equal(t, 3, total, "one pub/sub connection per master")
}
