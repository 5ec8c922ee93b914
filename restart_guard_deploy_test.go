package locksmith_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The restart guard on Redis Cluster and Sentinel.

// TestRestartGuardCluster: on Redis Cluster the guard watches the master
// of each key's slot. One master of three restarts empty: keys of its
// slots are refused, naming it, until it has been up for the maximum
// TTL; keys of the other masters' slots are granted at once.
func TestRestartGuardCluster(t *testing.T) {
	redistest.RequireCLI(t)
	cl := redistest.NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	l := newLocker(t, cl.Client(t), locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL))

	// Two keys on two different masters.
	owner := func(key string) *redistest.Server {
		slot, err := cl.Keyslot(ctx, key)
		require.NoError(t, err)
		s, err := cl.SlotOwner(ctx, slot)
		require.NoError(t, err)
		return s
	}
	keyA := uniqueKey(t)
	masterA := owner(keyA)
	keyB := uniqueKey(t)
	for owner(keyB) == masterA {
		keyB = uniqueKey(t)
	}
	for _, k := range []string{keyA, keyB} {
		require.NoError(t, untilCounted(t, l, k).Release(ctx))
	}

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	waitUptime(t, masters, 2) // so that new connections to the others cannot make them look out
	require.NoError(t, masterA.Restart())
	// Until the cluster takes the restarted node back, the error may be
	// the cluster's; then it is the guard's.
	var refusal error
	eventually(t, 20*time.Second, func() bool {
		_, refusal = l.Obtain(ctx, keyA)
		return errors.Is(refusal, locksmith.ErrRestarted)
	}, "the restarted master of %q was not refused", keyA)
	requireOut(t, refusal, []string{masterA.Addr}, nil)
	lk, err := l.Obtain(ctx, keyB)
	require.NoError(t, err, "the other masters count at once")
	require.NoError(t, lk.Release(ctx))
	// Once it has been up for the maximum TTL, and the cluster is up
	// (it may mark itself down for a moment as the node rejoins), the
	// restarted master counts again.
	eventually(t, 20*time.Second, func() bool {
		lk, err := l.Obtain(ctx, keyA)
		return err == nil && lk.Release(ctx) == nil
	}, "the restarted master never counted again")
}

// TestRestartGuardSentinelFailover: on Sentinel a failover is not a
// restart. The promoted replica has a run_id of its own, but it has been
// up all along, so locks are granted on it at once.
func TestRestartGuardSentinelFailover(t *testing.T) {
	s := redistest.SharedSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	require.NoError(t, s.WaitHealthy(ctx))
	l := newLocker(t, s.Client(t), locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL))
	require.NoError(t, untilCounted(t, l, uniqueKey(t)).Release(ctx))
	old, err := s.Master(ctx)
	require.NoError(t, err)
	runID := func(srv *redistest.Server) string {
		info, err := srv.Client(t).Info(ctx, "server").Result()
		require.NoError(t, err)
		i := strings.Index(info, "run_id:")
		require.GreaterOrEqual(t, i, 0, "no run_id in %q", info)
		return info[i+len("run_id:") : i+len("run_id:")+40]
	}
	oldID := runID(old)

	promoted, err := s.Failover(ctx)
	require.NoError(t, err)
	require.NotEqual(t, oldID, runID(promoted), "the promoted replica is another process")
	// The Locker's client follows the failover; its first attempts may
	// still reach the demoted master (READONLY), then it is granted at once.
	var lk *locksmith.Lock
	eventually(t, 10*time.Second, func() bool {
		lk, err = l.Obtain(ctx, uniqueKey(t))
		require.NotErrorIs(t, err, locksmith.ErrRestarted, "a failover is not a restart")
		return err == nil
	}, "no lock on the promoted replica")
	require.NoError(t, lk.Release(ctx))
	lk, err = newLocker(t, s.Client(t), locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL)).Obtain(ctx, uniqueKey(t))
	require.NoError(t, err, "a new client of the promoted replica counts at once")
	require.NoError(t, lk.Release(ctx))
}
