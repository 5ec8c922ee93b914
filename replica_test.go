package locksmith_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// startReplica starts a redis-server replicating primary and waits until
// its link is up.
func startReplica(t *testing.T, primary *redistest.Server) (*redistest.Server, *redis.Client) {
	t.Helper()
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	replica := redistest.New(t, "--replicaof", host, port)
	rc := replica.Client(t)
	eventually(t, 20*time.Second, func() bool {
		info, _ := rc.Info(t.Context(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	}, "the replica did not connect")
	return replica, rc
}

func TestWithReplicas(t *testing.T) {
	primary := redistest.New(t, "--repl-diskless-sync-delay", "0")
	replica, rc := startReplica(t, primary)
	ctx := t.Context()
	l := newLocker(t, primary.Client(t), locksmith.WithTTL(10*time.Second), locksmith.WithFencing())

	t.Run("acknowledged", func(t *testing.T) {
		key := uniqueKey(t)
		lk, err := l.Obtain(ctx, key, locksmith.WithReplicas(1, time.Second))
		require.NoError(t, err)
		// Acknowledged means the replica has it now, fence included.
		require.Equal(t, lk.Token(), rc.Get(ctx, key).Val())
		fence, err := rc.Get(ctx, names(t, "", key).Fence).Int64()
		require.NoError(t, err)
		require.Equal(t, lk.Fence(), fence)
		require.NoError(t, lk.Release(ctx))
	})

	t.Run("too few replicas", func(t *testing.T) {
		key := uniqueKey(t)
		raw := primary.Client(t)
		_, err := l.Obtain(ctx, key, locksmith.WithReplicas(2, 100*time.Millisecond))
		require.ErrorIs(t, err, locksmith.ErrNotReplicated)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		require.Zero(t, raw.Exists(ctx, key).Val(), "an unacknowledged lock must be released")
	})

	t.Run("replica gone", func(t *testing.T) {
		key := uniqueKey(t)
		raw := primary.Client(t)
		replica.Stop()
		_, err := l.Obtain(ctx, key, locksmith.WithReplicas(1, 100*time.Millisecond))
		require.ErrorIs(t, err, locksmith.ErrNotReplicated)
		require.Zero(t, raw.Exists(ctx, key).Val())
		// Without the option the lock is granted, unreplicated.
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	})
}

func TestWithReplicasBadInput(t *testing.T) {
	m := redistest.New(t)
	cnt := &counter{}
	c := newClient(t, m.Options(), []redis.Hook{cnt})
	l := newLocker(t, c, locksmith.WithTTL(time.Second))
	for _, opt := range []locksmith.Option{
		locksmith.WithReplicas(-1, time.Second),
		locksmith.WithReplicas(1, 0),
		locksmith.WithReplicas(1, 999*time.Microsecond),
		locksmith.WithReplicas(1, time.Second), // not shorter than the TTL
	} {
		_, err := l.Obtain(t.Context(), "k", opt)
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	}
	require.Zero(t, cnt.count())
	// Zero replicas turns the wait off.
	lk, err := l.Obtain(t.Context(), "k", locksmith.WithReplicas(0, 0))
	require.NoError(t, err)
	require.NoError(t, lk.Release(t.Context()))
}

// TestReplicatedLockSurvivesFailover promotes the replica, as a failover
// would, after a lock was acknowledged by it: the promoted server still
// holds the lock, and its fences continue above the old holder's.
func TestReplicatedLockSurvivesFailover(t *testing.T) {
	primary := redistest.New(t, "--repl-diskless-sync-delay", "0")
	replica, rc := startReplica(t, primary)
	ctx := t.Context()
	key := uniqueKey(t)
	old, err := newLocker(t, primary.Client(t), locksmith.WithFencing()).Obtain(ctx, key,
		locksmith.WithTTL(time.Minute), locksmith.WithReplicas(1, time.Second))
	require.NoError(t, err)

	primary.Kill()
	require.NoError(t, rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	promoted := newLocker(t, replica.Client(t), locksmith.WithFencing())
	_, err = promoted.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "the promoted replica must still hold the lock")

	// Once the lock is gone (deleted here, as if it expired), the next
	// fence is above the old holder's.
	require.NoError(t, rc.Del(ctx, key).Err())
	lk, err := promoted.Obtain(ctx, key)
	require.NoError(t, err)
	require.Greater(t, lk.Fence(), old.Fence())
	require.NoError(t, lk.Release(ctx))
}
