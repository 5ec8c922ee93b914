package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// TestAutoPipelineClient runs the API over go-redis's experimental
// auto-pipelining client, which docs/performance.md recommends for many
// concurrent calls on distinct keys: scripts, handoffs to waiters (pub/sub
// through the client underneath) and Once all work through it.
func TestAutoPipelineClient(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	client := newClient(t, srv.Options(), nil)
	ap, err := client.AutoPipeline()
	require.NoError(t, err)
	prefix := locksmith.WithPrefix(uniqueKey(t) + ":")
	l := newLocker(t, ap, prefix)
	key := uniqueKey(t)

	lk, err := l.Obtain(ctx, key, locksmith.WithTTL(time.Minute), locksmith.WithFencing())
	require.NoError(t, err)
	require.Positive(t, lk.Fence())
	ttl, err := lk.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.NoError(t, lk.Refresh(ctx, 2*time.Minute))
	_, err = l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	waiterGetsIt(t, ap, newLocker(t, ap, prefix), lk)

	require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
	ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, ran)
	require.NoError(t, l.Check(ctx))
}
