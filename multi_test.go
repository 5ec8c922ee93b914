package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// Sets of locks taken at once: Locker.ObtainAll and WithLocks.

// keySet returns n keys no other test uses, sharing a hash tag (so that
// the same set serves on Redis Cluster).
func keySet(t *testing.T, n int) []string {
	t.Helper()
	tag := strings.NewReplacer("{", "", "}", "").Replace(uniqueKey(t))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{%s}:%d", tag, i)
	}
	return keys
}

// requireHeldBy checks that every key (the Redis names) holds token.
func requireHeldBy(t *testing.T, c redis.UniversalClient, token string, rkeys ...string) {
	t.Helper()
	for _, k := range rkeys {
		require.Equal(t, token, c.Get(t.Context(), k).Val(), "key %q", k)
	}
}

// requireAbsent checks that no key (the Redis names) exists.
func requireAbsent(t *testing.T, c redis.UniversalClient, rkeys ...string) {
	t.Helper()
	for _, k := range rkeys {
		require.Zero(t, c.Exists(t.Context(), k).Val(), "key %q stayed behind", k)
	}
}

// warmUpSet is warmUp for the scripts of a set.
func warmUpSet(t *testing.T, l *locksmith.Locker) {
	t.Helper()
	ctx := t.Context()
	lk, err := l.ObtainAll(ctx, keySet(t, 2))
	require.NoError(t, err, "warm-up ObtainAll")
	require.NoError(t, lk.Refresh(ctx, time.Minute), "warm-up Refresh")
	_, err = lk.TTL(ctx)
	require.NoError(t, err, "warm-up TTL")
	require.NoError(t, lk.Release(ctx), "warm-up Release")
}

// TestObtainAll: one handle holds every key with one token; duplicates
// count once; TTL, Refresh and Release cover every key.
func TestObtainAll(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		c := b.client(t)
		l := newLocker(t, c, locksmith.WithTTL(10*time.Second))
		keys := keySet(t, 3)
		lk, err := l.ObtainAll(ctx, []string{keys[2], keys[0], keys[1], keys[0]})
		require.NoError(t, err)
		require.Equal(t, keys, lk.Keys(), "sorted, without duplicates")
		require.Equal(t, keys[0], lk.Key())
		require.Zero(t, lk.Fence())
		requireHeldBy(t, c, lk.Token(), keys...)
		require.WithinDuration(t, time.Now().Add(10*time.Second), lk.Deadline(), time.Second)

		require.NoError(t, lk.Refresh(ctx, time.Minute))
		for _, k := range keys {
			require.Greater(t, c.PTTL(ctx, k).Val(), 30*time.Second, "key %q not refreshed", k)
		}
		ttl, err := lk.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second)

		require.NoError(t, lk.Release(ctx))
		requireAbsent(t, c, keys...)
		require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
		_, err = lk.TTL(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld)
	})
}

// TestObtainAllAllOrNothing: a set with one key held elsewhere writes
// nothing, and says which key is held.
func TestObtainAllAllOrNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		c := b.client(t)
		l := newLocker(t, c)
		keys := keySet(t, 3)
		other, err := l.Obtain(ctx, keys[1])
		require.NoError(t, err)

		_, err = l.ObtainAll(ctx, keys)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorContains(t, err, keys[1])
		requireAbsent(t, c, keys[0], keys[2])
		requireHeldBy(t, c, other.Token(), keys[1])

		require.NoError(t, other.Release(ctx))
		lk, err := l.ObtainAll(ctx, keys)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	})
}

// TestObtainAllInvalid: bad input, and what the deployment cannot take,
// are refused with ErrInvalidArgument before anything is sent.
func TestObtainAllInvalid(t *testing.T) {
	var cnt counter
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c.AddHook(&cnt)
	t.Cleanup(func() { _ = c.Close() })
	l := newLocker(t, c)
	q := newQuorumLocker(t, []redis.UniversalClient{c, c, c})
	fn := func(context.Context) error { return nil }
	cases := []struct {
		name string
		l    *locksmith.Locker
		keys []string
		opts []locksmith.Option
	}{
		{"no keys", l, nil, nil},
		{"empty key", l, []string{"a", ""}, nil},
		{"replicas", l, []string{"a", "b"}, []locksmith.Option{locksmith.WithReplicas(1, time.Second)}},
		{"bad option", l, []string{"a", "b"}, []locksmith.Option{locksmith.WithTTL(0)}},
		{"quorum", q, []string{"a", "b"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.l.ObtainAll(t.Context(), tc.keys, tc.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.ErrorIs(t, tc.l.WithLocks(t.Context(), tc.keys, fn, tc.opts...), locksmith.ErrInvalidArgument)
		})
	}
	require.ErrorIs(t, l.WithLocks(t.Context(), []string{"a", "b"}, nil), locksmith.ErrInvalidArgument)
	require.Zero(t, cnt.count(), "sent %v", cnt.all())
}

// TestObtainAllOneKeyIsObtain: a set of one key (after duplicates are
// collapsed) sends what Obtain sends.
func TestObtainAllOneKeyIsObtain(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	var cnt counter
	c := newClient(t, srv.Options(), []redis.Hook{&cnt})
	l := newLocker(t, c, locksmith.WithFencing())
	warmUp(t, l)
	key := uniqueKey(t)

	cnt.reset()
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	obtain := cnt.all()
	require.NoError(t, lk.Release(ctx))

	cnt.reset()
	lk, err = l.ObtainAll(ctx, []string{key, key})
	require.NoError(t, err)
	require.Equal(t, obtain, cnt.all())
	require.Equal(t, []string{key}, lk.Keys())
	require.Equal(t, lk.Fence(), lk.FenceOf(key))
	require.NotZero(t, lk.Fence())
	require.Zero(t, lk.FenceOf("another"))
	require.NoError(t, lk.Release(ctx))
}

// TestObtainAllFencing: each key takes a fence of its own counter, the
// one Obtain uses; Fence is the highest.
func TestObtainAllFencing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		l := newLocker(t, b.client(t), locksmith.WithFencing())
		keys := keySet(t, 3)
		single, err := l.Obtain(ctx, keys[0])
		require.NoError(t, err)
		require.NoError(t, single.Release(ctx))

		lk, err := l.ObtainAll(ctx, keys)
		require.NoError(t, err)
		var highest int64
		for _, k := range keys {
			require.NotZero(t, lk.FenceOf(k), "key %q", k)
			highest = max(highest, lk.FenceOf(k))
		}
		require.Greater(t, lk.FenceOf(keys[0]), single.Fence(), "the set's fence follows the single lock's")
		require.Equal(t, highest, lk.Fence())
		require.Zero(t, lk.FenceOf("not in the set"))
		require.NoError(t, lk.Release(ctx))

		after, err := l.Obtain(ctx, keys[1])
		require.NoError(t, err)
		require.Greater(t, after.Fence(), lk.FenceOf(keys[1]))
		require.NoError(t, after.Release(ctx))
	})
}

// TestObtainAllWaits: with a retry strategy, a set waits for a key held
// elsewhere; a wait that gives up or is cancelled leaves nothing held.
func TestObtainAllWaits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		c := b.client(t)
		l := newLocker(t, c)
		keys := keySet(t, 3)

		t.Run("until released", func(t *testing.T) {
			other, err := l.Obtain(ctx, keys[2])
			require.NoError(t, err)
			var calls counter
			waiter := newLocker(t, b.client(t, &calls))
			got := make(chan error, 1)
			var lk *locksmith.Lock
			go func() {
				var err error
				lk, err = waiter.ObtainAll(ctx, keys, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
				got <- err
			}()
			eventually(t, 5*time.Second, func() bool { return calls.answeredOf("evalsha")+calls.answeredOf("eval") >= 2 },
				"the set was not refused twice")
			requireAbsent(t, c, keys[0], keys[1])
			require.NoError(t, other.Release(ctx))
			require.NoError(t, <-got)
			requireHeldBy(t, c, lk.Token(), keys...)
			require.NoError(t, lk.Release(ctx))
		})

		t.Run("gives up", func(t *testing.T) {
			other, err := l.Obtain(ctx, keys[1])
			require.NoError(t, err)
			_, err = l.ObtainAll(ctx, keys, locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(5*time.Millisecond), 3)))
			require.ErrorIs(t, err, locksmith.ErrNotObtained)
			requireAbsent(t, c, keys[0], keys[2])
			require.NoError(t, other.Release(ctx))
		})

		t.Run("cancelled", func(t *testing.T) {
			other, err := l.Obtain(ctx, keys[0])
			require.NoError(t, err)
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err = l.ObtainAll(cctx, keys, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
			require.ErrorIs(t, err, locksmith.ErrNotObtained)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			requireAbsent(t, c, keys[1], keys[2])
			require.NoError(t, other.Release(ctx))
		})

		t.Run("holder expires", func(t *testing.T) {
			// The wait is cut short by the holder's TTL, not the delay.
			_, err := l.Obtain(ctx, keys[1], locksmith.WithTTL(100*time.Millisecond))
			require.NoError(t, err)
			start := time.Now()
			lk, err := l.ObtainAll(ctx, keys, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
			require.NoError(t, err)
			require.Less(t, time.Since(start), 10*time.Second)
			require.NoError(t, lk.Release(ctx))
		})
	})
}

// TestObtainAllReleaseWakesWaiters: the release of a set is announced on
// each key's channel: single-key waiters, queued in Redis and asleep for a
// long retry delay, wake and get their key.
func TestObtainAllReleaseWakesWaiters(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := newClient(t, srv.Options(), nil)
	l := newLocker(t, c)
	keys := keySet(t, 2)
	set, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)

	got := queuedWaiters(t, srv, c, keys)
	start := time.Now()
	require.NoError(t, set.Release(ctx))
	for range keys {
		select {
		case w := <-got:
			require.NoError(t, w.err)
			require.NoError(t, w.lk.Release(ctx))
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not woken")
		}
	}
	require.Less(t, time.Since(start), 5*time.Second)
}

// A waited is what a waiting Obtain of queuedWaiters returned.
type waited struct {
	lk  *locksmith.Lock
	err error
}

// queuedWaiters starts, on a Locker of its own on srv, one Obtain per key
// that waits with a retry delay of a minute (so that only an announced
// release wakes it in time), and returns once each is subscribed to its
// key's channel and queued in Redis (seen through c). Each call's lock or
// error arrives on the channel; the calls end with the test's context.
func queuedWaiters(t *testing.T, srv *redistest.Server, c *redis.Client, keys []string) <-chan waited {
	t.Helper()
	ctx := t.Context()
	waiter := newLocker(t, newClient(t, srv.Options(), nil))
	got := make(chan waited, len(keys))
	for _, k := range keys {
		go func() {
			lk, err := waiter.Obtain(ctx, k, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
			got <- waited{lk, err}
		}()
	}
	for _, k := range keys {
		waitSubscribed(t, c, plainNames(k).Channel, 1)
		eventually(t, 5*time.Second, func() bool { return c.Exists(ctx, plainNames(k).Queue).Val() == 1 }, "queued on %q", k)
	}
	return got
}

// TestObtainAllReleasePartlyQueued: the release of a set of 300 keys
// (more than one of the release script's calls of 256 keys) where only
// the first and the last key have a waiter queued: those two are handed
// to their waiters, and every other key is deleted.
func TestObtainAllReleasePartlyQueued(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := newClient(t, srv.Options(), nil)
	l := newLocker(t, c)
	keys := keySet(t, 300)
	set, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)

	ends := []string{keys[0], keys[len(keys)-1]}
	got := queuedWaiters(t, srv, c, ends)
	require.NoError(t, set.Release(ctx))
	for range ends {
		select {
		case w := <-got:
			require.NoError(t, w.err)
			lk := w.lk
			requireHeldBy(t, c, lk.Token(), lk.Key())
			defer func() { require.NoError(t, lk.Release(ctx)) }()
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not handed its key")
		}
	}
	requireAbsent(t, c, keys[1:len(keys)-1]...)
}

// TestObtainAllLost: a set is lost as a whole when one key goes: Refresh
// and TTL fail and change nothing, the lease ends with ErrLockLost, and
// Release deletes the keys still held.
func TestObtainAllLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		c := b.client(t)
		l := newLocker(t, c, locksmith.WithTTL(10*time.Second))
		keys := keySet(t, 3)

		lk, err := l.ObtainAll(ctx, keys)
		require.NoError(t, err)
		require.NoError(t, c.Del(ctx, keys[1]).Err())
		require.ErrorIs(t, lk.Refresh(ctx, time.Minute), locksmith.ErrNotHeld)
		require.Less(t, c.PTTL(ctx, keys[0]).Val(), 11*time.Second, "a lost set was refreshed")
		_, err = lk.TTL(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld)
		err = lk.Release(ctx)
		require.ErrorIs(t, err, locksmith.ErrNotHeld)
		require.ErrorContains(t, err, keys[1], "the error names the set")
		requireAbsent(t, c, keys...)

		err = l.WithLocks(ctx, keys, func(ctx context.Context) error {
			require.NoError(t, c.Set(ctx, keys[2], "someone else", 0).Err())
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), locksmith.ErrLockLost)
			return nil
		}, locksmith.WithRenewInterval(20*time.Millisecond))
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		requireAbsent(t, c, keys[0], keys[1])
		require.Equal(t, "someone else", c.Get(ctx, keys[2]).Val())
	})
}

// TestWithLocks: fn runs holding every key, with the set in its context;
// the set is released after.
func TestWithLocks(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		c := b.client(t)
		l := newLocker(t, c)
		keys := keySet(t, 2)
		errFn := errors.New("fn failed")
		err := l.WithLocks(ctx, keys, func(ctx context.Context) error {
			lk := locksmith.LockFromContext(ctx)
			require.Equal(t, keys, lk.Keys())
			requireHeldBy(t, c, lk.Token(), keys...)
			return errFn
		})
		require.ErrorIs(t, err, errFn)
		requireAbsent(t, c, keys...)

		// The lease renews every key: the set outlives its TTL.
		start := time.Now()
		err = l.WithLocks(ctx, keys, func(ctx context.Context) error {
			lk := locksmith.LockFromContext(ctx)
			eventually(t, 10*time.Second, func() bool { return lk.Deadline().After(start.Add(900 * time.Millisecond)) },
				"the lease did not renew the set past three TTLs")
			requireHeldBy(t, c, lk.Token(), keys...)
			return ctx.Err()
		}, locksmith.WithTTL(300*time.Millisecond))
		require.NoError(t, err)
		requireAbsent(t, c, keys...)
	})
}

// TestObtainAllFaults: a reply lost after the script ran, a resent
// script, a reply later than the validity: each ends holding every key or
// none.
func TestObtainAllFaults(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	admin := newClient(t, srv.Options(), nil)

	t.Run("lost reply", func(t *testing.T) {
		var f fault
		l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{&f}), locksmith.WithFencing())
		warmUpSet(t, l)
		keys := keySet(t, 3)
		f.loseReply.Store(true)
		_, err := l.ObtainAll(ctx, keys)
		f.loseReply.Store(false)
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a lost reply is not someone else's lock")
		require.Equal(t, int64(1), admin.Exists(ctx, plainNames(keys[0]).Fence).Val(), "the script did not run")
		requireAbsent(t, admin, keys...)
	})

	t.Run("resent", func(t *testing.T) {
		var f fault
		l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{&f}), locksmith.WithFencing())
		warmUpSet(t, l)
		keys := keySet(t, 3)
		f.resend.Store(true)
		lk, err := l.ObtainAll(ctx, keys)
		f.resend.Store(false)
		require.NoError(t, err, "the second delivery found the set the caller's")
		requireHeldBy(t, admin, lk.Token(), keys...)
		for _, k := range keys {
			counter, err := admin.Get(ctx, plainNames(k).Fence).Int64()
			require.NoError(t, err)
			require.Equal(t, counter, lk.FenceOf(k), "the fence of %q is the one the first delivery took", k)
		}
		require.NoError(t, lk.Release(ctx))
	})

	t.Run("ctx ends mid-call", func(t *testing.T) {
		var f fault
		l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{&f}))
		warmUpSet(t, l)
		keys := keySet(t, 3)
		f.slowReply.Store(int64(100 * time.Millisecond))
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := l.ObtainAll(cctx, keys)
		f.slowReply.Store(0)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requireAbsent(t, admin, keys...)
	})

	t.Run("reply after validity", func(t *testing.T) {
		var f fault
		l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{&f}), locksmith.WithTTL(50*time.Millisecond))
		warmUpSet(t, l)
		keys := keySet(t, 2)
		f.slowReply.Store(int64(100 * time.Millisecond))
		_, err := l.ObtainAll(ctx, keys)
		f.slowReply.Store(0)
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		requireAbsent(t, admin, keys...)
	})
}

// TestObtainAllRefusedMidway: a script refused after some of its writes
// (an ACL rule changed since the permissions check, which lets the user
// SET the first key of the set and its fence counter but no other key)
// leaves no key held.
func TestObtainAllRefusedMidway(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	client, admin := aclUser(t, srv, minimalRule...)
	l := newLocker(t, client, locksmith.WithPrefix("locksmith:"), locksmith.WithFencing())
	keys := keySet(t, 2)
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	first, second := names(t, "locksmith:", keys[0]), names(t, "locksmith:", keys[1])
	fence, err := admin.Get(ctx, first.Fence).Int64()
	require.NoError(t, err)
	setRules(t, admin, client, "-set", "(+set ~"+first.Lock+" ~"+first.Fence+")")
	_, err = l.ObtainAll(ctx, keys)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not someone else's lock")
	require.NotEqual(t, strconv.FormatInt(fence, 10), admin.Get(ctx, first.Fence).Val(), "the script was not refused midway: the first key's fence did not move")
	requireAbsent(t, admin, first.Lock, second.Lock)

	// Allowed again, the set is taken, with fences above those before.
	setRules(t, admin, client, "+set")
	lk, err = l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.Greater(t, lk.FenceOf(keys[0]), fence)
	require.NoError(t, lk.Release(ctx))
}

// TestObtainAllTryOnceRefusedMidway: the attempt of a set that does not
// wait writes each key as it reads it; a write refused on a later key
// (an ACL rule) after the first was created leaves nothing held, and the
// error is not "held elsewhere".
func TestObtainAllTryOnceRefusedMidway(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	client, admin := aclUser(t, srv, minimalRule...)
	l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
	keys := keySet(t, 2)
	first, second := names(t, "locksmith:", keys[0]), names(t, "locksmith:", keys[1])
	setRules(t, admin, client, "-set", "(+set ~"+first.Lock+")")
	sets, dels := setCalls(t, admin)
	_, err := l.ObtainAll(ctx, keys)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not someone else's lock")
	requireAbsent(t, admin, first.Lock, second.Lock)
	sets2, dels2 := setCalls(t, admin)
	require.Equal(t, sets+1, sets2, "the script was not refused midway: the first key was not written")
	require.Equal(t, dels+1, dels2, "the first key was not deleted by the withdrawal")

	setRules(t, admin, client, "+set")
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	requireAbsent(t, admin, first.Lock, second.Lock)
}

// setCalls returns how many SET and DEL commands the server has run
// (INFO commandstats; refused ones are not counted).
func setCalls(t *testing.T, c *redis.Client) (sets, dels int) {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	calls := func(cmd string) int {
		_, rest, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
		if !ok {
			return 0
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		require.NoError(t, err)
		return n
	}
	return calls("set"), calls("del")
}

// TestObtainAllUnderMaxmemory: a server out of memory refuses the first
// write of the script: nothing is held, and the error is not "held
// elsewhere".
func TestObtainAllUnderMaxmemory(t *testing.T) {
	srv := redistest.New(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	ctx := t.Context()
	client := newClient(t, srv.Options(), nil)
	l := newLocker(t, client, locksmith.WithFencing())
	warmUpSet(t, l)
	// Fill with ever smaller values, so that memory stays full once the
	// refused command's own buffer is freed.
	for _, size := range []int{64 << 10, 1 << 10, 16} {
		v := strings.Repeat("x", size)
		for i := 0; ; i++ {
			err := client.Set(ctx, "fill:"+uniqueKey(t), v, 0).Err()
			if err != nil {
				require.True(t, redis.HasErrorPrefix(err, "OOM"), "filling: %v", err)
				break
			}
			require.Less(t, i, 100000, "memory never filled")
		}
	}
	keys := keySet(t, 3)
	_, err := l.ObtainAll(ctx, keys)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not someone else's lock")
	requireAbsent(t, client, keys...)
	for _, k := range client.Keys(ctx, "fill:*").Val() {
		client.Del(ctx, k)
	}
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
}

// TestObtainAllClosed: a Locker closed while ObtainAll waits ends the
// call with ErrClosed, holding nothing; later calls send nothing.
func TestObtainAllClosed(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := newClient(t, srv.Options(), nil)
	keys := keySet(t, 3)
	holder := newLocker(t, c)
	other, err := holder.Obtain(ctx, keys[1])
	require.NoError(t, err)

	var calls counter
	l := locksmith.New(newClient(t, srv.Options(), []redis.Hook{&calls}))
	got := make(chan error, 1)
	go func() {
		_, err := l.ObtainAll(ctx, keys, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
		got <- err
	}()
	// Its first attempt was refused: it waits a minute for the next.
	eventually(t, 5*time.Second, func() bool { return calls.answeredOf("evalsha")+calls.answeredOf("eval") >= 1 },
		"the set made no attempt")
	require.NoError(t, l.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, locksmith.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("ObtainAll did not return after Close")
	}
	requireAbsent(t, c, keys[0], keys[2])
	_, err = l.ObtainAll(ctx, keys)
	require.ErrorIs(t, err, locksmith.ErrClosed)
	require.NoError(t, other.Release(ctx))

	// Closed while a winning attempt is in flight: the set is deleted.
	var f fault
	l = locksmith.New(newClient(t, srv.Options(), []redis.Hook{&f}))
	warmUpSet(t, l)
	f.slowReply.Store(int64(200 * time.Millisecond))
	go func() {
		_, err := l.ObtainAll(ctx, keys)
		got <- err
	}()
	eventually(t, 5*time.Second, func() bool { return c.Exists(ctx, keys[0]).Val() == 1 }, "the set was taken")
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-got, locksmith.ErrClosed)
	f.slowReply.Store(0)
	requireAbsent(t, c, keys...)
}

// TestObtainAllOverlapping: goroutines taking overlapping sets, in
// different orders, and single keys, never hold a key at once and all
// finish: one atomic step per set cannot deadlock.
func TestObtainAllOverlapping(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		keys := keySet(t, 5)
		var inUse [5]atomic.Int32
		var overlaps atomic.Int32
		var wg sync.WaitGroup
		for w := range 6 {
			l := newLocker(t, b.client(t))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range 10 {
					idx := []int{w % 5, (w + r + 1) % 5, (w + 2*r + 3) % 5}
					if w == 5 {
						idx = idx[:1] // a single-key caller
					}
					idx = slices.Compact(slices.Sorted(slices.Values(idx)))
					var set []string
					for _, i := range idx {
						set = append(set, keys[i])
					}
					err := l.WithLocks(ctx, set, func(context.Context) error {
						for _, i := range idx {
							if inUse[i].Add(1) != 1 {
								overlaps.Add(1)
							}
						}
						time.Sleep(time.Millisecond) // the work: a while for an overlap to show
						for _, i := range idx {
							inUse[i].Add(-1)
						}
						return nil
					}, locksmith.WithRetry(locksmith.LinearBackoff(2*time.Millisecond)))
					if err != nil {
						t.Errorf("worker %d round %d: %v", w, r, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, overlaps.Load())
	})
}

// TestObtainAllCluster: on Redis Cluster, a set in one slot is taken in
// one step (sets across slots: multi_cluster_test.go).
func TestObtainAllCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	cc := cl.Client(t)
	l := newLocker(t, cc, locksmith.WithFencing())
	keys := keySet(t, 3)
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	requireHeldBy(t, cc, lk.Token(), keys...)
	require.NoError(t, lk.Refresh(ctx, time.Minute))
	require.NoError(t, lk.Release(ctx))
	requireAbsent(t, cc, keys...)
}

// TestObtainAllSentinel: a set through a Sentinel failover client.
func TestObtainAllSentinel(t *testing.T) {
	s := redistest.SharedSentinel(t)
	ctx := t.Context()
	c := s.Client(t)
	l := newLocker(t, c)
	keys := keySet(t, 2)
	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	requireHeldBy(t, c, lk.Token(), keys...)
	require.NoError(t, lk.Release(ctx))
	requireAbsent(t, c, keys...)
}
