package locksmith_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A waiting set in the keys' handoff queues: keys handed to it one by one,
// handed on when it gives up, and its release handing each key over.

// waitSetQueued waits until key's handoff queue holds n live entries.
func waitSetQueued(t *testing.T, l *locksmith.Locker, key string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		st, err := l.Inspect(t.Context(), key)
		return err == nil && st.Queued == n
	}, "%d entries queued for %q", n, key)
}

// waitHeldBySet waits until key holds a set's token (a UUID, a slash
// and the set's size), and returns it.
func waitHeldBySet(t *testing.T, l *locksmith.Locker, key string) string {
	t.Helper()
	var token string
	eventually(t, 10*time.Second, func() bool {
		st, err := l.Inspect(t.Context(), key)
		token = st.Token
		return err == nil && strings.Contains(st.Token, "/")
	}, "%q handed to a set", key)
	return token
}

// setWaitFixture holds A and B with single locks of their own, queues a
// set on {A, B} and then a single-key waiter on A, and hands A to the
// set by releasing it.
type setWaitFixture struct {
	keys       []string
	holderB    *locksmith.Lock
	setToken   string
	set        chan setOutcome
	single     chan setOutcome
	cancelSet  context.CancelFunc
	inspecting *locksmith.Locker
	events     *recorder
}

type setOutcome struct {
	lk  *locksmith.Lock
	err error
}

func newSetWaitFixture(t *testing.T, fencing bool, setOpts ...locksmith.Option) *setWaitFixture {
	t.Helper()
	srv := redistest.Shared(t)
	ctx := t.Context()
	var opts []locksmith.Option
	if fencing {
		opts = append(opts, locksmith.WithFencing())
	}
	f := &setWaitFixture{keys: keySet(t, 2), set: make(chan setOutcome, 1), single: make(chan setOutcome, 1),
		events: &recorder{}}
	holders := newLocker(t, newClient(t, srv.Options(), nil), opts...)
	holderA, err := holders.Obtain(ctx, f.keys[0])
	require.NoError(t, err)
	f.holderB, err = holders.Obtain(ctx, f.keys[1])
	require.NoError(t, err)
	f.inspecting = holders

	setLocker := newLocker(t, newClient(t, srv.Options(), nil), append(opts, locksmith.WithObserver(f.events))...)
	setCtx, cancel := context.WithCancel(ctx)
	f.cancelSet = cancel
	t.Cleanup(cancel)
	go func() {
		lk, err := setLocker.ObtainAll(setCtx, f.keys, append(setOpts, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))...)
		f.set <- setOutcome{lk, err}
	}()
	waitSetQueued(t, holders, f.keys[0], 1)
	waitSetQueued(t, holders, f.keys[1], 1)

	singleLocker := newLocker(t, newClient(t, srv.Options(), nil), opts...)
	go func() {
		lk, err := singleLocker.Obtain(ctx, f.keys[0], locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
		f.single <- setOutcome{lk, err}
	}()
	waitSetQueued(t, holders, f.keys[0], 2)

	require.NoError(t, holderA.Release(ctx))
	f.setToken = waitHeldBySet(t, holders, f.keys[0])
	require.True(t, strings.HasSuffix(f.setToken, "/2"), "token %q", f.setToken)
	st, err := holders.Inspect(ctx, f.keys[0])
	require.NoError(t, err)
	require.Equal(t, 1, st.Queued, "the single-key waiter stays queued behind the set")
	return f
}

// TestObtainAllHandedOver: a waiting set is handed each key as its holder
// releases it, ahead of a single-key waiter that came after it, holds the
// first while it waits for the second, and, once released, hands the key
// to that waiter.
func TestObtainAllHandedOver(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fenced"}[fencing], func(t *testing.T) {
			ctx := t.Context()
			f := newSetWaitFixture(t, fencing)
			select {
			case got := <-f.set:
				t.Fatalf("the set returned with one key: %v", got.err)
			case got := <-f.single:
				t.Fatalf("the single-key waiter overtook the set: %v", got.err)
			default:
			}
			fenceB := f.holderB.Fence()
			require.NoError(t, f.holderB.Release(ctx))
			var set setOutcome
			select {
			case set = <-f.set:
			case <-time.After(10 * time.Second):
				t.Fatal("the set was not handed its second key")
			}
			require.NoError(t, set.err)
			require.Equal(t, f.setToken, set.lk.Token())
			require.Greater(t, set.lk.Deadline(), time.Now())
			if fencing {
				require.Greater(t, set.lk.FenceOf(f.keys[1]), fenceB, "the set's fence follows the holder's")
				st, err := f.inspecting.Inspect(ctx, f.keys[0])
				require.NoError(t, err)
				require.Equal(t, st.Fence, set.lk.FenceOf(f.keys[0]), "the fence the handoff took")
			}
			// Events reach the observer from a goroutine of the Locker's.
			ev := f.events.waitFor(t, "the set's EventObtain", func(e locksmith.Event) bool { return e.Kind == locksmith.EventObtain })
			require.Equal(t, f.keys, ev.Keys)
			require.True(t, ev.HandedOver, "the set's last key was handed over")

			require.NoError(t, set.lk.Release(ctx))
			rel := f.events.waitFor(t, "the set's EventRelease", func(e locksmith.Event) bool { return e.Kind == locksmith.EventRelease })
			require.Equal(t, f.keys, rel.Keys)
			require.NoError(t, rel.Err)
			select {
			case got := <-f.single:
				require.NoError(t, got.err)
				require.NoError(t, got.lk.Release(ctx))
			case <-time.After(10 * time.Second):
				t.Fatal("the set's release did not hand the key to the waiter")
			}
			for _, k := range f.keys {
				st, err := f.inspecting.Inspect(ctx, k)
				require.NoError(t, err)
				require.False(t, st.Held, "%q", k)
				require.Zero(t, st.Queued, "%q", k)
			}
		})
	}
}

// TestObtainAllGivesUpHandsOn: a waiting set that gives up while it holds
// a key handed to it hands that key to the next waiter, leaves the key it
// still waits for to its holder, and leaves no entry in either queue.
func TestObtainAllGivesUpHandsOn(t *testing.T) {
	ctx := t.Context()
	f := newSetWaitFixture(t, false)
	f.cancelSet()
	select {
	case got := <-f.set:
		require.ErrorIs(t, got.err, locksmith.ErrNotObtained)
		require.ErrorIs(t, got.err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the set did not give up")
	}
	select {
	case got := <-f.single:
		require.NoError(t, got.err)
		require.NoError(t, got.lk.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the key the set held was not handed on")
	}
	st, err := f.inspecting.Inspect(ctx, f.keys[1])
	require.NoError(t, err)
	require.Equal(t, f.holderB.Token(), st.Token, "the holder keeps the key the set waited for")
	require.Zero(t, st.Queued, "the set's entry is gone")
	st, err = f.inspecting.Inspect(ctx, f.keys[0])
	require.NoError(t, err)
	require.Zero(t, st.Queued)
	require.False(t, st.Held)
	require.NoError(t, f.holderB.Release(ctx))
}

// TestObtainAllStartsOver: a waiting set whose entry in a queue lapsed
// (here removed by hand; in life, a pause longer than the entry's life)
// finds it out at its next attempt (the renewal of the key handed to it),
// withdraws, handing that key on to the waiter behind it, and starts
// over with a new token, so that it still gets the set, after that
// waiter, once the keys are free.
func TestObtainAllStartsOver(t *testing.T) {
	ctx := t.Context()
	f := newSetWaitFixture(t, false, locksmith.WithTTL(time.Second))
	c := newClient(t, redistest.Shared(t).Options(), nil)
	queueB := plainNames(f.keys[1]).Queue
	members, err := c.ZRange(ctx, queueB, 0, -1).Result()
	require.NoError(t, err)
	removed := 0
	for _, m := range members {
		if strings.HasSuffix(m, " "+f.setToken) {
			require.NoError(t, c.ZRem(ctx, queueB, m).Err())
			removed++
		}
	}
	require.Equal(t, 2, removed, "the set's entry (two members) in %v", members)

	var single setOutcome
	select {
	case single = <-f.single:
	case <-time.After(10 * time.Second):
		t.Fatal("the set did not withdraw and hand its key on")
	}
	require.NoError(t, single.err)
	waitSetQueued(t, f.inspecting, f.keys[1], 1) // the set, queued again
	require.NoError(t, single.lk.Release(ctx))
	require.NoError(t, f.holderB.Release(ctx))
	var set setOutcome
	select {
	case set = <-f.set:
	case <-time.After(10 * time.Second):
		t.Fatal("the set did not get its keys after starting over")
	}
	require.NoError(t, set.err)
	require.NotEqual(t, f.setToken, set.lk.Token(), "started over with a new token")
	requireHeldBy(t, c, set.lk.Token(), f.keys...)
	require.NoError(t, set.lk.Release(ctx))
	for _, k := range f.keys {
		st, err := f.inspecting.Inspect(ctx, k)
		require.NoError(t, err)
		require.Zero(t, st.Queued, "%q", k)
	}
}

// TestSetQueuedBehindWaitingSet: a set that starts queueing for a key held
// by another set, handed it while that set waits for a key they both
// need, comes after that set in the queue of that key too, whatever the
// server's clock says; so the key goes to the set that holds the other,
// and both get their keys. Here the first set's arrival is moved a minute
// ahead in its queues before it is handed the key, as a server clock that
// then stepped back a minute would leave it; the same order must hold
// for two sets that arrive within one millisecond, which is how two sets
// deadlocked in TestSetsMakeProgress when arrivals were milliseconds alone.
func TestSetQueuedBehindWaitingSet(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := newClient(t, srv.Options(), nil)
	keys := keySet(t, 2)
	holders := newLocker(t, newClient(t, srv.Options(), nil))
	holdA, err := holders.Obtain(ctx, keys[0])
	require.NoError(t, err)
	holdB, err := holders.Obtain(ctx, keys[1])
	require.NoError(t, err)

	wait := locksmith.WithRetry(locksmith.LinearBackoff(time.Minute))
	obtainAll := func(out chan<- setOutcome) {
		l := newLocker(t, newClient(t, srv.Options(), nil))
		go func() {
			lk, err := l.ObtainAll(ctx, keys, wait)
			out <- setOutcome{lk, err}
		}()
	}
	first, second := make(chan setOutcome, 1), make(chan setOutcome, 1)
	obtainAll(first)
	waitSetQueued(t, holders, keys[0], 1)
	waitSetQueued(t, holders, keys[1], 1)
	ahead := map[string]float64{}
	for _, k := range keys {
		q := plainNames(k).Queue
		zs, err := c.ZRangeWithScores(ctx, q, 0, -1).Result()
		require.NoError(t, err)
		for _, z := range zs {
			if m := z.Member.(string); strings.HasPrefix(m, "a:") {
				ahead[k] = z.Score + float64(time.Minute.Milliseconds())
				require.NoError(t, c.ZAddXX(ctx, q, redis.Z{Score: ahead[k], Member: m}).Err())
			}
		}
	}
	require.Len(t, ahead, 2, "the first set's entries")
	require.NoError(t, holdA.Release(ctx))
	firstToken := waitHeldBySet(t, holders, keys[0])

	obtainAll(second)
	waitSetQueued(t, holders, keys[1], 2)
	zs, err := c.ZRangeWithScores(ctx, plainNames(keys[1]).Queue, 0, -1).Result()
	require.NoError(t, err)
	for _, z := range zs {
		if m := z.Member.(string); strings.HasPrefix(m, "a:") && !strings.HasSuffix(m, firstToken) {
			require.Greater(t, z.Score, ahead[keys[1]], "the second set's arrival in the queue of %q", keys[1])
		}
	}

	require.NoError(t, holdB.Release(ctx))
	for i, ch := range []chan setOutcome{first, second} {
		select {
		case got := <-ch:
			require.NoError(t, got.err)
			if i == 0 {
				require.Equal(t, firstToken, got.lk.Token())
			}
			requireHeldBy(t, c, got.lk.Token(), keys...)
			require.NoError(t, got.lk.Release(ctx))
		case <-time.After(10 * time.Second):
			t.Fatalf("set %d did not get its keys: the sets deadlocked", i+1)
		}
	}
	for _, k := range keys {
		st, err := holders.Inspect(ctx, k)
		require.NoError(t, err)
		require.False(t, st.Held, "%q", k)
		require.Zero(t, st.Queued, "%q", k)
	}
}
