package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// lookAlikes are lock names whose braces or endings resemble each other's
// companion keys; each is a lock of its own.
var lookAlikes = []string{"x", "{x}", "{x}y", "a{b}c", "x#{x}", "queue#{x}", "x:done", "}x", "{}x"}

// TestLookAlikeKeysAreIndependent checks that look-alike lock names get
// independent locks, completion records and handoffs, on one server and
// on a real Cluster.
func TestLookAlikeKeysAreIndependent(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv := redistest.New(t)
		testLookAlikes(t, newClient(t, srv.Options(), nil))
	})
	t.Run("cluster", func(t *testing.T) {
		cc := redistest.SharedCluster(t).Client(t)
		testLookAlikes(t, cc)
	})
}

func testLookAlikes(t *testing.T, client redis.UniversalClient) {
	ctx := t.Context()
	prefix := uniqueKey(t) + ":"
	l := newLocker(t, client, locksmith.WithPrefix(prefix))

	// Each job runs once, whatever ran before under a look-alike name.
	for _, key := range lookAlikes {
		ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err, "Once(%q)", key)
		require.True(t, ran, "Once(%q) was skipped as done", key)
	}

	// All are held at once; then a waiter of each, on another Locker, is
	// handed its own lock and no other.
	holders := make(map[string]*locksmith.Lock)
	for _, key := range lookAlikes {
		lk, err := l.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
		require.NoError(t, err, "Obtain(%q)", key)
		holders[key] = lk
	}
	w := newLocker(t, client, locksmith.WithPrefix(prefix))
	type result struct {
		key string
		lk  *locksmith.Lock
		err error
	}
	results := make(chan result, len(lookAlikes))
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, key := range lookAlikes {
		go func() {
			lk, err := w.Obtain(waitCtx, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Second)))
			results <- result{key, lk, err}
		}()
	}
	for _, key := range lookAlikes {
		k, err := l.Keys(key)
		require.NoError(t, err)
		eventually(t, 10*time.Second, func() bool { return client.Exists(ctx, k.Queue).Val() == 1 }, "a waiter of %q queued", key)
	}
	for i, key := range lookAlikes {
		require.NoError(t, holders[key].Release(ctx), "Release(%q)", key)
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, key, r.key, "releasing %q handed over %q", key, r.key)
		// The locks not released yet are still their holders'.
		for _, other := range lookAlikes[i+1:] {
			_, err := holders[other].TTL(ctx)
			require.NoError(t, err, "%q lost when %q was released", other, key)
		}
		require.NoError(t, r.lk.Release(ctx))
	}
}

func TestReservedLockNames(t *testing.T) {
	l := namer // nothing is sent: every call is refused first
	_, err := l.Obtain(t.Context(), "~queue#{x}")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = l.Keys("~x")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = l.Obtain(t.Context(), "x", locksmith.WithPrefix("app{"))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
}
