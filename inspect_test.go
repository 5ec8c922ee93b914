package locksmith_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestInspect(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithPrefix("jobs:"))
		key := uniqueKey(t)
		inspect := func() locksmith.LockStatus {
			t.Helper()
			st, err := l.Inspect(ctx, key)
			require.NoError(t, err)
			return st
		}

		require.Equal(t, locksmith.LockStatus{}, inspect(), "nothing there yet")

		lk, err := l.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		st := inspect()
		require.True(t, st.Held)
		require.Equal(t, lk.Token(), st.Token)
		require.Greater(t, st.TTL, 50*time.Second)
		require.LessOrEqual(t, st.TTL, time.Minute)
		require.Zero(t, st.Fence, "no fence was ever issued")
		require.Nil(t, st.Done)
		require.Zero(t, st.Queued)

		// A waiter of another Locker is queued for a handoff, and counted
		// until it gives up.
		waiter := newLocker(t, b.client(t), locksmith.WithPrefix("jobs:"))
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		waited := make(chan error, 1)
		go func() {
			_, err := waiter.Obtain(wctx, key, locksmith.WithRetry(forever))
			waited <- err
		}()
		eventually(t, 5*time.Second, func() bool { return inspect().Queued == 1 }, "one waiter queued")
		cancel()
		require.ErrorIs(t, <-waited, context.Canceled)
		require.Zero(t, inspect().Queued, "the waiter withdrew")
		require.NoError(t, lk.Release(ctx))

		lk, err = l.Obtain(ctx, key, locksmith.WithFencing())
		require.NoError(t, err)
		st = inspect()
		require.Equal(t, lk.Token(), st.Token)
		require.Equal(t, lk.Fence(), st.Fence, "the holder's fence")
		require.NoError(t, lk.Release(ctx))
		st = inspect()
		require.False(t, st.Held)
		require.Empty(t, st.Token)
		require.Zero(t, st.TTL)
		require.Equal(t, lk.Fence(), st.Fence, "the counter outlives the lock")

		// A holder without fencing takes no fence: the last one stays.
		plain, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.Equal(t, lk.Fence(), inspect().Fence)
		require.NoError(t, plain.Release(ctx))

		before := time.Now()
		var token string
		var fence int64
		ran, err := l.Once(ctx, key, func(ctx context.Context) error {
			lk := locksmith.LockFromContext(ctx)
			token, fence = lk.Token(), lk.Fence()
			return nil
		}, locksmith.WithFencing())
		require.True(t, ran)
		require.NoError(t, err)
		st = inspect()
		require.False(t, st.Held, "completing the job released the lock")
		require.Equal(t, fence, st.Fence)
		require.NotNil(t, st.Done)
		c, ok, err := l.Completed(ctx, key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, c, *st.Done, "Inspect and Done read the same record")
		require.Equal(t, token, st.Done.Token)
		require.WithinRange(t, st.Done.At, before, time.Now())
		host, _ := os.Hostname()
		require.Equal(t, fmt.Sprintf("%s:%d", host, os.Getpid()), st.Done.By)

		// A key set by hand, without an expiry.
		require.NoError(t, raw.Set(ctx, "jobs:"+key, "by-hand", 0).Err())
		st = inspect()
		require.True(t, st.Held)
		require.Equal(t, "by-hand", st.Token)
		require.Negative(t, st.TTL, "no expiry")
	})
}

// TestInspectSet checks that Inspect of any key of a set tells that its
// holder holds it as part of a set, and of how many keys, and that no
// other holder's token is taken for a set's.
func TestInspectSet(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		cnt := &counter{}
		l := newLocker(t, b.client(t, cnt), locksmith.WithPrefix("jobs:"))
		inspect := func(key string) locksmith.LockStatus {
			t.Helper()
			st, err := l.Inspect(ctx, key)
			require.NoError(t, err)
			return st
		}

		tag := "{" + uniqueKey(t) + "}"
		inspect(tag) // loads the script
		keys := []string{tag + ":c", tag + ":a", tag + ":b"}
		set, err := l.ObtainAll(ctx, keys, locksmith.WithTTL(time.Minute))
		require.NoError(t, err)
		for _, key := range keys {
			cnt.reset()
			st := inspect(key)
			require.Equal(t, []string{"evalsha"}, cnt.names, "key %q: one round trip", key)
			require.True(t, st.Held, "key %q", key)
			require.Equal(t, set.Token(), st.Token, "key %q", key)
			require.Equal(t, 3, st.SetSize, "key %q", key)
		}
		require.NoError(t, set.Release(ctx))
		for _, key := range keys {
			require.Equal(t, locksmith.LockStatus{}, inspect(key), "key %q after the release", key)
		}

		// A duplicate key counts once, as ObtainAll holds it once.
		set, err = l.ObtainAll(ctx, []string{tag + ":a", tag + ":b", tag + ":a"})
		require.NoError(t, err)
		require.Equal(t, 2, inspect(tag+":b").SetSize)
		require.NoError(t, set.Release(ctx))

		// Not sets: a single lock, a set of one key (which is Obtain), an
		// election's term whose value looks like a set's size, and tokens
		// written by hand.
		single, err := l.Obtain(ctx, tag+":a")
		require.NoError(t, err)
		one, err := l.ObtainAll(ctx, []string{tag + ":b"})
		require.NoError(t, err)
		for _, key := range []string{tag + ":a", tag + ":b"} {
			st := inspect(key)
			require.True(t, st.Held, "key %q", key)
			require.Zero(t, st.SetSize, "key %q, token %q", key, st.Token)
		}
		require.NoError(t, single.Release(ctx))
		require.NoError(t, one.Release(ctx))
		term, err := l.Election(tag+":e").Campaign(ctx, "db1/2")
		require.NoError(t, err)
		st := inspect(tag + ":e")
		require.Equal(t, term.Token(), st.Token)
		require.Zero(t, st.SetSize, "a term's token %q", st.Token)
		require.NoError(t, term.Resign(ctx))
		for _, token := range []string{"x/abc", "by-hand/2", set.Token() + "/2"} {
			require.NoError(t, raw.Set(ctx, "jobs:"+tag+":h", token, time.Minute).Err())
			st = inspect(tag + ":h")
			require.True(t, st.Held)
			require.Zero(t, st.SetSize, "token %q", token)
		}
	})
}

// TestInspectCompanionKeys checks that Inspect reads the fence counter and
// the completion record where Obtain and Once keep them, for keys with and
// without a hash tag.
func TestInspectCompanionKeys(t *testing.T) {
	m := miniredis.RunT(t)
	c := newClient(t, &redis.Options{Addr: m.Addr()}, nil)
	l := newLocker(t, c, locksmith.WithPrefix("p:"))
	for _, tc := range []struct{ key, fence, done string }{
		{"report", "p:~fence#{p:report}", "p:~done#{p:report}"},
		{"{order:42}:ship", "p:~fence:{order:42}:ship", "p:~done:{order:42}:ship"},
	} {
		m.Set(tc.fence, "42")
		m.Set(tc.done, `{"completed_at":"2026-11-30T02:15:00Z","by":"db1:4242","token":"tok"}`)
		st, err := l.Inspect(t.Context(), tc.key)
		require.NoError(t, err, "key %q", tc.key)
		require.Equal(t, locksmith.LockStatus{Fence: 42, Done: &locksmith.Completion{
			At: time.Date(2026, 11, 30, 2, 15, 0, 0, time.UTC), By: "db1:4242", Token: "tok",
		}}, st, "key %q", tc.key)
	}
}

func TestInspectRoundTrips(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		cnt := &counter{}
		l := newLocker(t, b.client(t, cnt))
		key := uniqueKey(t)
		_, err := l.Inspect(ctx, key) // loads the script
		require.NoError(t, err)
		cnt.reset()
		_, err = l.Inspect(ctx, key)
		require.NoError(t, err)
		require.Equal(t, []string{"evalsha"}, cnt.names)
	})
}

func TestInspectForeignValues(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t))

		key := uniqueKey(t)
		require.NoError(t, raw.Set(ctx, names(t, "", key).Fence, "not a number", time.Minute).Err())
		_, err := l.Inspect(ctx, key)
		require.ErrorContains(t, err, "fence counter")

		key = uniqueKey(t)
		require.NoError(t, raw.Set(ctx, doneKey(key), "not json", time.Minute).Err())
		_, err = l.Inspect(ctx, key)
		require.ErrorContains(t, err, "completion record")

		key = uniqueKey(t)
		require.NoError(t, raw.HSet(ctx, key, "f", "v").Err())
		_, err = l.Inspect(ctx, key)
		require.Error(t, err, "a lock key of another type")
		require.NotErrorIs(t, err, locksmith.ErrInvalidArgument)
	})
}

func TestInspectBadInputSendsNothing(t *testing.T) {
	m := miniredis.RunT(t)
	cnt := &counter{}
	c := newClient(t, &redis.Options{Addr: m.Addr()}, []redis.Hook{cnt})
	for _, tc := range []struct {
		name string
		l    *locksmith.Locker
		key  string
		opts []locksmith.Option
	}{
		{"empty key", newLocker(t, c), "", nil},
		{"bad option", newLocker(t, c), "k", []locksmith.Option{locksmith.WithTTL(0)}},
		{"zero option", newLocker(t, c), "k", []locksmith.Option{{}}},
		{"bad default", newLocker(t, c, locksmith.WithTTL(0)), "k", nil},
		{"nil client", newLocker(t, nil), "k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.l.Inspect(t.Context(), tc.key, tc.opts...)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.Zero(t, cnt.count(), "bad input must send nothing")
		})
	}
}

// TestInspectOnCluster checks that Inspect's one script is valid on Redis
// Cluster, which refuses a script whose keys are in different slots, for
// keys whose companions need a hash tag added or a suffix forced into
// their slot.
func TestInspectOnCluster(t *testing.T) {
	ctx := t.Context()
	cc := redistest.SharedCluster(t).Client(t)

	l := newLocker(t, cc, locksmith.WithPrefix(uniqueKey(t)+":"), locksmith.WithFencing())
	for _, key := range []string{"report:2026-11-30", "{order:42}:ship", "a}b", "a{}b"} {
		_, err := l.Once(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err, "key %q", key)
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err, "key %q", key)
		st, err := l.Inspect(ctx, key)
		require.NoError(t, err, "key %q", key)
		require.True(t, st.Held, "key %q", key)
		require.Equal(t, lk.Fence(), st.Fence, "key %q", key)
		require.NotNil(t, st.Done, "key %q", key)
		require.NoError(t, lk.Release(ctx))
	}
}
