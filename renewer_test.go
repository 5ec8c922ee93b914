package locksmith_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// roundTrips is a hook that counts what a client sends: single commands,
// and pipelines with the commands in them.
type roundTrips struct {
	mu                    sync.Mutex
	singles, pipes, piped int
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.singles++
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		r.pipes++
		r.piped += len(cmds)
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (r *roundTrips) counts() (singles, pipes, piped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.singles, r.pipes, r.piped
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.singles, r.pipes, r.piped = 0, 0, 0
}

// TestLeasesRenewedTogether: the leases of many locks of one Locker are
// renewed in pipelines, one round trip for all the renewals that fall due
// within a tenth of the renewal interval, by a bounded number of
// goroutines, not one per lease; every lease stays valid.
func TestLeasesRenewedTogether(t *testing.T) {
	const (
		n        = 300
		ttl      = 900 * time.Millisecond
		interval = 300 * time.Millisecond
		rounds   = 3
	)
	srv := redistest.Shared(t)
	ctx := t.Context()
	var rt roundTrips
	l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{&rt}), locksmith.WithTTL(ttl), locksmith.WithRenewInterval(interval))

	locks := make([]*locksmith.Lock, n)
	var err error
	// A lease's first renewal falls due an interval after its lock was
	// obtained, so the first renewals fall due over the time the locks
	// took to obtain (hundreds of milliseconds on a loaded machine under
	// -race), not only the time their leases took to start.
	first := time.Now()
	for i := range locks {
		locks[i], err = l.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err)
	}
	goroutines := runtime.NumGoroutine()
	leases := make([]context.Context, n)
	for i, lk := range locks {
		leases[i] = lk.Lease(ctx)
	}
	spread := time.Since(first) // over which the first renewals fall due
	rt.reset()
	deadlines := make([]time.Time, n)
	for i, lk := range locks {
		deadlines[i] = lk.Deadline()
	}

	// Wait for every lock to be renewed rounds times: its Deadline moves
	// on at each renewal.
	eventually(t, 10*time.Second, func() bool {
		for i, lk := range locks {
			if lk.Deadline().Before(deadlines[i].Add(time.Duration(rounds) * interval * 9 / 10)) {
				return false
			}
		}
		return true
	}, "every lease renewed %d times", rounds)
	singles, pipes, piped := rt.counts()
	// No goroutine per lease: a timer's callback sends the pipelines.
	// Timer callbacks (the renewer's, and each lease's watchdog, which
	// fire together for leases taken together) run on goroutines of their
	// own for a moment, so the count is read until it is seen between
	// them; one goroutine per lease would keep it 300 above all along.
	var during int
	eventually(t, 5*time.Second, func() bool {
		during = runtime.NumGoroutine()
		return during-goroutines <= 2
	}, "goroutines for %d leases: never within 2 of the %d before them", n, goroutines)
	t.Logf("%d leases, %d renewals each: %d pipelines of %d commands, %d single commands; renewals first due over %v; goroutines %d before the leases, %d with them",
		n, rounds, pipes, piped, singles, spread.Round(time.Millisecond), goroutines, during)

	for i, lease := range leases {
		require.NoError(t, lease.Err(), "lease %d", i)
	}
	require.Zero(t, singles, "every renewal is pipelined")
	require.GreaterOrEqual(t, piped, n*rounds)
	// The renewals due within one window go in one pipeline: about one
	// pipeline per window of the spread, per round (and one round more for
	// those renewed while the test looked).
	windows := int(spread/(interval/10)) + 2
	require.LessOrEqual(t, pipes, (rounds+1)*windows, "round trips")

	for _, lk := range locks {
		require.NoError(t, lk.Release(ctx))
	}
	for i, lease := range leases {
		require.ErrorIs(t, context.Cause(lease), context.Canceled, "lease %d after its release", i)
	}
}

// TestLeaseLostAmongMany: among leases renewed together, on one server
// and on Redis Cluster (one pipeline per master), the one whose lock was
// deleted ends with ErrLockLost at its next renewal, and the others go on
// being renewed.
func TestLeaseLostAmongMany(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv := redistest.Shared(t)
		leaseLostAmongMany(t, srv.Client(t), srv.Client(t), 20)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.SharedCluster(t)
		leaseLostAmongMany(t, cl.Client(t), cl.Client(t), 30)
	})
}

// leaseLostAmongMany leases n locks on client, deletes one with raw, and
// checks that its lease alone ends.
func leaseLostAmongMany(t *testing.T, client, raw redis.UniversalClient, n int) {
	ctx := t.Context()
	l := newLocker(t, client, locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(100*time.Millisecond))
	locks := make([]*locksmith.Lock, n)
	leases := make([]context.Context, n)
	keys := make([]string, n)
	for i := range locks {
		keys[i] = fmt.Sprintf("%s:%d", uniqueKey(t), i) // spread over the slots
		lk, err := l.Obtain(ctx, keys[i])
		require.NoError(t, err)
		locks[i], leases[i] = lk, lk.Lease(ctx)
	}
	lost := n / 2
	require.NoError(t, raw.Del(ctx, plainNames(keys[lost]).Lock).Err())
	select {
	case <-leases[lost].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease of the deleted lock did not end")
	}
	require.ErrorIs(t, context.Cause(leases[lost]), locksmith.ErrLockLost)
	require.Contains(t, context.Cause(leases[lost]).Error(), "renewal found")

	// The others: renewed once more since.
	since := time.Now()
	eventually(t, 5*time.Second, func() bool {
		for i, lk := range locks {
			if i != lost && !lk.Deadline().After(since.Add(time.Second-100*time.Millisecond)) {
				return false
			}
		}
		return true
	}, "the other leases renewed after the loss")
	for i, lk := range locks {
		if i == lost {
			require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
			continue
		}
		require.NoError(t, leases[i].Err(), "lease %d", i)
		require.NoError(t, lk.Release(ctx))
	}
}

// TestClusterSlowMasterHoldsUpNoOtherLease: on Redis Cluster, while one
// master does not answer (DEBUG SLEEP), the leases on the other masters
// go on being renewed, and a lock deleted on another master is lost at
// its next renewal, before the sleeping master answers again: the
// pipeline of one master holds up no lease of another. Once it answers,
// its own leases are renewed before their Deadline and live on.
func TestClusterSlowMasterHoldsUpNoOtherLease(t *testing.T) {
	const sleep = 3 * time.Second
	cl := redistest.NewCluster(t, 3, 0)
	ctx := t.Context()
	raw := cl.Client(t)
	l := newLocker(t, cl.Client(t), locksmith.WithTTL(5*time.Second), locksmith.WithRenewInterval(200*time.Millisecond))

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	slow := masters[0]
	var onSlow, onOthers []string
	for i := 0; len(onSlow) < 3 || len(onOthers) < 3; i++ {
		key := fmt.Sprintf("%s:%d", uniqueKey(t), i)
		owner, err := cl.KeyOwner(ctx, plainNames(key).Lock)
		require.NoError(t, err)
		if owner == slow {
			onSlow = append(onSlow, key)
		} else {
			onOthers = append(onOthers, key)
		}
	}
	leases := map[string]context.Context{}
	locks := map[string]*locksmith.Lock{}
	for _, k := range append(append([]string{}, onSlow...), onOthers...) {
		lk, err := l.Obtain(ctx, k)
		require.NoError(t, err)
		locks[k], leases[k] = lk, lk.Lease(ctx)
	}

	// The test's own cluster client learns the slots now, not from the
	// sleeping master when it first needs them.
	lost := onOthers[0]
	require.Equal(t, int64(1), raw.Exists(ctx, plainNames(lost).Lock).Val())

	opt := slow.Options()
	opt.ReadTimeout = sleep + 5*time.Second
	sleeper := newClient(t, opt, nil)
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.WithoutCancel(ctx), "DEBUG", "SLEEP", sleep.Seconds()).Err() }()
	probe := slow.Options()
	probe.ReadTimeout, probe.MaxRetries = 50*time.Millisecond, -1
	prober := newClient(t, probe, nil)
	asleep := func() bool { return prober.Ping(ctx).Err() != nil }
	eventually(t, 5*time.Second, asleep, "the slow master stops answering")
	// A renewal of the slow master's leases is now on its way, or will be.

	seen := time.Now()
	require.NoError(t, raw.Del(ctx, plainNames(lost).Lock).Err())
	select {
	case <-leases[lost].Done():
	case <-time.After(sleep):
		t.Fatal("the lease of the lock deleted on another master did not end while the slow master slept")
	}
	t.Logf("asleep seen, lock deleted and its loss signalled in %v", time.Since(seen))
	require.True(t, asleep(), "the loss was signalled only after the slow master answered again")
	require.ErrorIs(t, context.Cause(leases[lost]), locksmith.ErrLockLost)

	require.NoError(t, <-slept)
	since := time.Now()
	eventually(t, 5*time.Second, func() bool {
		for k, lk := range locks {
			if k != lost && !lk.Deadline().After(since.Add(4*time.Second)) {
				return false
			}
		}
		return true
	}, "every other lease renewed after the slow master answered")
	for k, lk := range locks {
		if k == lost {
			continue
		}
		require.NoError(t, leases[k].Err(), "%q", k)
		require.NoError(t, lk.Release(ctx))
	}
}
