package locksmith_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// Sets of locks whose keys lie in several Redis Cluster hash slots, taken
// one slot group after the other in the order of the slots.

// slotKeys returns n keys no other test uses, each in a hash slot of its
// own, sorted, and their slots.
func slotKeys(t *testing.T, cl *redistest.Cluster, n int) ([]string, map[string]int) {
	t.Helper()
	base := uniqueKey(t)
	slots := map[string]int{}
	used := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("{%s:%d}:k", base, i)
		slot, err := cl.Keyslot(t.Context(), k)
		require.NoError(t, err)
		if used[slot] {
			continue
		}
		used[slot] = true
		slots[k] = slot
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, slots
}

// bySlot returns keys ordered by their slots.
func bySlot(keys []string, slots map[string]int) []string {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b string) int { return slots[a] - slots[b] })
	return out
}

// TestObtainAllAcrossSlots: a set of keys in different slots is held
// whole: one token on every key, fences per key, and Refresh, TTL and
// Release over every slot.
func TestObtainAllAcrossSlots(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	cc := cl.Client(t)
	l := newLocker(t, cc, locksmith.WithFencing(), locksmith.WithTTL(10*time.Second))
	keys, _ := slotKeys(t, cl, 3)
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.Equal(t, keys, lk.Keys())
	requireHeldBy(t, cc, lk.Token(), keys...)
	for _, k := range keys {
		require.NotZero(t, lk.FenceOf(k), "key %q", k)
	}
	require.NoError(t, lk.Refresh(ctx, time.Minute))
	for _, k := range keys {
		require.Greater(t, cc.PTTL(ctx, k).Val(), 30*time.Second, "key %q not refreshed", k)
	}
	ttl, err := lk.TTL(ctx)
	require.NoError(t, err)
	require.Greater(t, ttl, 30*time.Second)
	require.NoError(t, lk.Release(ctx))
	requireAbsent(t, cc, keys...)
}

// TestObtainAllAcrossSlotsAllOrNothing: a set that does not wait, whose
// key in a later slot is held, leaves nothing of the slots before it.
func TestObtainAllAcrossSlotsAllOrNothing(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	cc := cl.Client(t)
	l := newLocker(t, cc)
	keys, slots := slotKeys(t, cl, 3)
	ordered := bySlot(keys, slots)
	last := ordered[len(ordered)-1]
	other, err := l.Obtain(ctx, last)
	require.NoError(t, err)
	_, err = l.ObtainAll(ctx, keys)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorContains(t, err, last)
	requireAbsent(t, cc, ordered[:len(ordered)-1]...)
	requireHeldBy(t, cc, other.Token(), last)
	require.NoError(t, other.Release(ctx))
}

// TestObtainAllAcrossSlotsWaits: a waiting set holds the slots before the
// one it waits in, renewing them, and gets the whole set when that key is
// released; a set that gives up while waiting releases what it holds.
func TestObtainAllAcrossSlotsWaits(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	for _, giveUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "released", true: "gives up"}[giveUp], func(t *testing.T) {
			ctx := t.Context()
			keys, slots := slotKeys(t, cl, 2)
			ordered := bySlot(keys, slots)
			holders := newLocker(t, cc)
			held, err := holders.Obtain(ctx, ordered[1])
			require.NoError(t, err)

			l := newLocker(t, cl.Client(t))
			setCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := make(chan setOutcome, 1)
			go func() {
				// A TTL of 600ms: the first slot's key is renewed while
				// the set waits for the second.
				lk, err := l.ObtainAll(setCtx, keys, locksmith.WithTTL(600*time.Millisecond),
					locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
				got <- setOutcome{lk, err}
			}()
			token := waitHeldBySetOn(t, cc, ordered[0])
			waitSetQueued(t, holders, ordered[1], 1)
			// The first slot's key is renewed while the set waits: its
			// TTL goes up again, twice, so the set holds it past the TTL
			// it was taken with.
			for range 2 {
				prev := cc.PTTL(ctx, ordered[0]).Val()
				eventually(t, 5*time.Second, func() bool {
					cur := cc.PTTL(ctx, ordered[0]).Val()
					up := cur > prev+50*time.Millisecond
					prev = cur
					return up
				}, "%q renewed", ordered[0])
			}
			requireHeldBy(t, cc, token, ordered[0])
			if giveUp {
				cancel()
				res := <-got
				require.ErrorIs(t, res.err, locksmith.ErrNotObtained)
				requireAbsent(t, cc, ordered[0])
				st, err := holders.Inspect(ctx, ordered[1])
				require.NoError(t, err)
				require.Zero(t, st.Queued, "the set's entry is gone")
				require.NoError(t, held.Release(ctx))
				return
			}
			require.NoError(t, held.Release(ctx))
			var res setOutcome
			select {
			case res = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the set was not handed its last key")
			}
			require.NoError(t, res.err)
			require.Equal(t, token, res.lk.Token())
			requireHeldBy(t, cc, token, keys...)
			require.NoError(t, res.lk.Release(ctx))
			requireAbsent(t, cc, keys...)
		})
	}
}

// waitHeldBySetOn waits until key (the Redis name) holds a set's token,
// read directly, and returns it.
func waitHeldBySetOn(t *testing.T, c redis.UniversalClient, key string) string {
	t.Helper()
	var token string
	eventually(t, 10*time.Second, func() bool {
		token = c.Get(t.Context(), key).Val()
		return len(token) > 2 && token[len(token)-2] == '/'
	}, "%q held by a set", key)
	return token
}

// TestObtainAllAcrossSlotsNoDeadlock: workers on two Lockers take random
// overlapping sets of keys in four slots, each naming its keys in a
// random order, for a bounded number of rounds: every one finishes, and
// no two hold one key at once.
func TestObtainAllAcrossSlotsNoDeadlock(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	keys, _ := slotKeys(t, cl, 4)
	lockers := []*locksmith.Locker{newLocker(t, cl.Client(t)), newLocker(t, cl.Client(t))}
	const workers, rounds = 6, 40
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var (
		mu     sync.Mutex
		inside = map[string]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			l := lockers[w%len(lockers)]
			for r := range rounds {
				set := slices.Clone(keys)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:2+rng.IntN(len(set)-1)]
				err := l.WithLocks(ctx, set, func(context.Context) error {
					mu.Lock()
					for _, k := range set {
						inside[k]++
						if inside[k] > 1 {
							mu.Unlock()
							return fmt.Errorf("two holders of %q", k)
						}
					}
					mu.Unlock()
					time.Sleep(time.Millisecond) // the critical section
					mu.Lock()
					for _, k := range set {
						inside[k]--
					}
					mu.Unlock()
					return nil
				}, locksmith.WithTTL(10*time.Second), locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
