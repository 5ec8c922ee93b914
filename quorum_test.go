package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// quorum is five independent redis-servers.
type quorum struct {
	servers []*redistest.Server
}

func newQuorum(t *testing.T) *quorum {
	t.Helper()
	q := &quorum{}
	for range 5 {
		q.servers = append(q.servers, redistest.New(t))
	}
	return q
}

// clients returns a new client of each server, with timeouts that the
// client enforces, as NewQuorum asks.
func (q *quorum) clients(t *testing.T) []redis.UniversalClient {
	t.Helper()
	var cs []redis.UniversalClient
	for _, s := range q.servers {
		cs = append(cs, newClient(t, &redis.Options{
			Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
		}, nil))
	}
	return cs
}

// holders counts the servers whose key holds token.
func (q *quorum) holders(t *testing.T, key, token string) int {
	t.Helper()
	n := 0
	for _, s := range q.servers {
		if s.Pid() == 0 {
			continue
		}
		c := s.Client(t)
		if c.Get(t.Context(), key).Val() == token {
			n++
		}
	}
	return n
}

func TestQuorumBasics(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	l := newQuorumLocker(t, q.clients(t), locksmith.WithTTL(2*time.Second), locksmith.WithMaxTTL(time.Minute))
	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 5, q.holders(t, key, lk.Token()))

	_, err = newQuorumLocker(t, q.clients(t)).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)

	ttl, err := lk.TTL(ctx)
	require.NoError(t, err)
	require.Greater(t, ttl, time.Second)
	require.NoError(t, lk.Refresh(ctx, time.Minute))
	ttl, err = lk.TTL(ctx)
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)

	require.NoError(t, lk.Release(ctx))
	require.Zero(t, q.holders(t, key, lk.Token()))
	require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
}

// TestQuorumScriptCacheFlushed checks the EVAL fallback of the masters,
// which share one argument list (each resends with a copy of its own):
// with every master's script cache flushed before each call, the lock
// is still taken and released on all of them.
func TestQuorumScriptCacheFlushed(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	l := newQuorumLocker(t, q.clients(t), locksmith.WithTTL(2*time.Second))
	flush := func() {
		for _, s := range q.servers {
			require.NoError(t, s.Client(t).ScriptFlush(ctx).Err())
		}
	}
	for range 3 {
		key := uniqueKey(t)
		flush()
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.Equal(t, 5, q.holders(t, key, lk.Token()))
		flush()
		require.NoError(t, lk.Release(ctx))
		require.Zero(t, q.holders(t, key, lk.Token()))
	}
}

func TestQuorumRefusesWhatItCannotHonour(t *testing.T) {
	q := newQuorum(t)
	cnt := &counter{}
	var cs []redis.UniversalClient
	for _, s := range q.servers {
		cs = append(cs, newClient(t, s.Options(), []redis.Hook{cnt}))
	}
	ctx := t.Context()
	l := newQuorumLocker(t, cs)
	for _, opt := range []locksmith.Option{locksmith.WithFencing(), locksmith.WithReplicas(1, time.Second)} {
		_, err := l.Obtain(ctx, "k", opt)
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
		_, err = newQuorumLocker(t, cs, opt).Obtain(ctx, "k")
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	}
	_, err := l.Once(ctx, "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = newQuorumLocker(t, nil).Obtain(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = newQuorumLocker(t, []redis.UniversalClient{cs[0], nil}).Obtain(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.Zero(t, cnt.count())
}

// TestQuorumRefusesWhatOnlyOneDeploymentServes checks each call that a
// quorum's Locker has no store for (its semaphores, read-write locks,
// Once records, Inspect and elections): each is refused with an error
// matching ErrInvalidArgument that names the quorum, before anything is
// sent.
func TestQuorumRefusesWhatOnlyOneDeploymentServes(t *testing.T) {
	q := newQuorum(t)
	cnt := &counter{}
	var cs []redis.UniversalClient
	for _, s := range q.servers[:3] {
		cs = append(cs, newClient(t, s.Options(), []redis.Hook{cnt}))
	}
	ctx := t.Context()
	l := newQuorumLocker(t, cs)
	noop := func(context.Context) error { return nil }
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Once", func() error { _, err := l.Once(ctx, "k", noop); return err }},
		{"Completed", func() error { _, _, err := l.Completed(ctx, "k"); return err }},
		{"Inspect", func() error { _, err := l.Inspect(ctx, "k"); return err }},
		{"Semaphore.Acquire", func() error { _, err := l.Semaphore("k", 2).Acquire(ctx); return err }},
		{"Semaphore.WithPermit", func() error { return l.Semaphore("k", 2).WithPermit(ctx, noop) }},
		{"Semaphore.Inspect", func() error { _, err := l.Semaphore("k", 2).Inspect(ctx); return err }},
		{"RWMutex.ObtainRead", func() error { _, err := l.RWMutex("k").ObtainRead(ctx); return err }},
		{"RWMutex.ObtainWrite", func() error { _, err := l.RWMutex("k").ObtainWrite(ctx); return err }},
		{"RWMutex.WithReadLock", func() error { return l.RWMutex("k").WithReadLock(ctx, noop) }},
		{"RWMutex.WithWriteLock", func() error { return l.RWMutex("k").WithWriteLock(ctx, noop) }},
		{"RWMutex.Inspect", func() error { _, err := l.RWMutex("k").Inspect(ctx); return err }},
		{"Election.Campaign", func() error { _, err := l.Election("k").Campaign(ctx, "v"); return err }},
		{"Election.Run", func() error {
			return l.Election("k").Run(ctx, "v", func(context.Context, *locksmith.Term) error { return nil })
		}},
		{"Election.Leader", func() error { _, err := l.Election("k").Leader(ctx); return err }},
		{"Election.Observe", func() error { _, err := l.Election("k").Observe(ctx); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.ErrorContains(t, err, "on a quorum of masters")
		})
	}
	require.Zero(t, cnt.count(), "refused calls sent %v", cnt.all())
}

func TestQuorumContention(t *testing.T) {
	q := newQuorum(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lockers := []*locksmith.Locker{
		newQuorumLocker(t, q.clients(t), locksmith.WithTTL(5*time.Second)),
		newQuorumLocker(t, q.clients(t), locksmith.WithTTL(5*time.Second)),
	}
	acquired, overlaps := contend(t, ctx, lockers, uniqueKey(t), 4, 10, 200*time.Microsecond,
		locksmith.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))
	require.Zero(t, overlaps)
	require.Equal(t, int64(2*4*10), acquired)
}

func TestQuorumSurvivesMinorityAndFailsClosedWithout(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	l := newQuorumLocker(t, q.clients(t), locksmith.WithTTL(2*time.Second), locksmith.WithRenewInterval(100*time.Millisecond))
	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	lctx := lk.Lease(ctx)

	// Two of five down: the lease goes on, others are still refused.
	q.servers[0].Stop()
	q.servers[1].Stop()
	// Renewed twice by the three that are up: the deadline moves on.
	// (Renewals that all failed would leave it, and the 2s lease would
	// still be alive for a while.)
	for range 2 {
		last := lk.Deadline()
		eventually(t, 5*time.Second, func() bool { return lk.Deadline().After(last) },
			"the lease was not renewed with two of five down; deadline %v", last)
	}
	require.NoError(t, lctx.Err())
	_, err = newQuorumLocker(t, q.clients(t)).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	other, err := l.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err, "a new lock needs only the three that are up")
	require.NoError(t, other.Release(ctx))

	// Three down: no majority answers. The lease ends, and Obtain fails
	// closed: an error that is not ErrNotObtained.
	q.servers[2].Stop()
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease survived the loss of the majority")
	}
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	_, err = l.Obtain(ctx, uniqueKey(t))
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	_ = lk.Release(ctx)
}

func TestQuorumSplitAcquireLeavesNothing(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	key := uniqueKey(t)
	// Another holder has the key on two masters: three are still enough.
	for _, s := range q.servers[:2] {
		require.NoError(t, s.Client(t).Set(ctx, key, "other", time.Minute).Err())
	}
	lk, err := newQuorumLocker(t, q.clients(t)).Obtain(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 3, q.holders(t, key, lk.Token()))
	require.NoError(t, lk.Release(ctx))
	require.Equal(t, 2, q.holders(t, key, "other"), "the other holder's keys are untouched")

	// On three masters: refused, and the two it got are given back.
	require.NoError(t, q.servers[2].Client(t).Set(ctx, key, "other", time.Minute).Err())
	_, err = newQuorumLocker(t, q.clients(t)).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	for _, s := range q.servers[3:] {
		require.Zero(t, s.Client(t).Exists(ctx, key).Val(), "a failed quorum acquire left its key behind")
	}
}

// TestQuorumClose: a quorum's Locker asks its masters from goroutines of
// its own, which Close stops and waits for; locks obtained before are
// still refreshed and released after it, by calls that start goroutines
// of their own and wait for them.
func TestQuorumClose(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	clients := q.clients(t)
	ignore := goleak.IgnoreCurrent()
	opts := []locksmith.Option{locksmith.WithTTL(time.Minute)}
	for _, s := range q.servers {
		opts = append(opts, locksmith.WithPersistentMaster(s.Addr))
	}
	l := locksmith.NewQuorum(clients, opts...)
	var locks []*locksmith.Lock
	for range 3 {
		lk, err := l.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err)
		locks = append(locks, lk)
	}
	require.NoError(t, l.Close())
	goleak.VerifyNone(t, ignore)

	_, err := l.Obtain(ctx, uniqueKey(t))
	require.ErrorIs(t, err, locksmith.ErrClosed)
	for _, lk := range locks {
		require.NoError(t, lk.Refresh(ctx, time.Minute))
		ttl, err := lk.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second)
		require.NoError(t, lk.Release(ctx))
		require.Zero(t, q.holders(t, lk.Key(), lk.Token()), "released on every master")
	}
	require.NoError(t, l.Close(), "a second Close")
	goleak.VerifyNone(t, ignore)
}

// TestQuorumAskersGrowWithCallsInFlight: calls made at once while a
// master is slow find its one asking goroutine busy and start more for
// it, which stay for the calls that follow (a Locker's goroutines grow to
// its calls in flight, up to a bound, instead of one started per call);
// Close stops every one of them.
func TestQuorumAskersGrowWithCallsInFlight(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	clients := q.clients(t)
	slow := q.servers[1].Client(t)
	opt := q.servers[1].Options()
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	probe := newClient(t, opt, nil)
	require.NoError(t, probe.Ping(ctx).Err())
	ignore := goleak.IgnoreCurrent()
	// TTL 5s: each master is asked for at most 500ms (a tenth of it, at
	// most maxNodeWait), a window wide enough for calls started at once
	// to overlap on a busy machine.
	opts := []locksmith.Option{locksmith.WithTTL(5 * time.Second)}
	for _, s := range q.servers {
		opts = append(opts, locksmith.WithPersistentMaster(s.Addr))
	}
	l := locksmith.NewQuorum(clients, opts...)
	lk, err := l.Obtain(ctx, uniqueKey(t)) // starts one asker a master
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	require.Equal(t, []int{0, 1, 1, 1, 1}, locksmith.QuorumAskers(l))

	// Master 1 sleeps: each call's question to it waits out its 500ms,
	// so calls made at once find its asker busy.
	slept := make(chan error, 1)
	go func() { slept <- slow.Do(context.WithoutCancel(ctx), "debug", "sleep", "2").Err() }()
	eventually(t, 5*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		return probe.Ping(pctx).Err() != nil
	}, "master 1 did not fall asleep")
	const calls = 8
	start := make(chan struct{})
	errs := make(chan error, calls)
	for range calls {
		go func() {
			<-start
			lk, err := l.Obtain(ctx, uniqueKey(t))
			if err == nil {
				err = lk.Release(ctx)
			}
			errs <- err
		}()
	}
	close(start)
	for range calls {
		require.NoError(t, <-errs, "four of five masters answer")
	}
	require.NoError(t, <-slept)
	grown := locksmith.QuorumAskers(l)
	require.Greater(t, grown[1], 1, "no asker started for the slow master: %v", grown)
	for i, n := range grown[1:] {
		require.LessOrEqual(t, n, calls, "master %d", i+1)
	}

	// They stay: calls one at a time start none.
	for range 3 {
		lk, err := l.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}
	require.Equal(t, grown, locksmith.QuorumAskers(l))
	require.NoError(t, l.Close())
	goleak.VerifyNone(t, ignore)
}
