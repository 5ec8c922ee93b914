package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The restart guard's tests: a master counts only once it has been up for
// the Locker's maximum TTL, as the server itself tells.

// guardTTL is the TTL of the guard's tests, and so their maximum TTL: a
// restarted master stays out for it, and up to a second more (its uptime
// is read in whole seconds, rounded so that it never looks up longer).
const guardTTL = 500 * time.Millisecond

// untilCounted obtains key on l with a waiting Obtain, which waits out the
// masters the guard keeps out (servers the test has just started, too),
// within 10s; it returns the lock.
func untilCounted(t *testing.T, l *locksmith.Locker, key string, opts ...locksmith.Option) *locksmith.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lk, err := l.Obtain(ctx, key, append([]locksmith.Option{locksmith.WithRetry(locksmith.LinearBackoff(20 * time.Millisecond))}, opts...)...)
	require.NoError(t, err, "the guard kept the masters out for over 10s")
	return lk
}

// requireOut checks that err is the guard's refusal of an Obtain: it
// matches ErrNotObtained and ErrRestarted, names each of addrs and says
// how long it stays out, and names no other master.
func requireOut(t *testing.T, err error, addrs []string, others []string) {
	t.Helper()
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, err, locksmith.ErrRestarted)
	var re *locksmith.RestartError
	require.ErrorAs(t, err, &re)
	for _, a := range addrs {
		require.Regexp(t, "master "+a+` \(run_id [0-9a-f]{8}\) has been up for [^,]+, stays out for [0-9.]+m?s more`, err.Error())
	}
	for _, a := range others {
		require.NotContains(t, err.Error(), a)
	}
}

// waitUptime waits until each of servers reports an uptime_in_seconds of
// at least n.
func waitUptime(t *testing.T, servers []*redistest.Server, n int64) {
	t.Helper()
	for _, s := range servers {
		c := s.Client(t)
		eventually(t, time.Duration(n+5)*time.Second, func() bool {
			info, err := c.InfoMap(t.Context(), "server").Result()
			require.NoError(t, err)
			up, err := strconv.ParseInt(info["Server"]["uptime_in_seconds"], 10, 64)
			require.NoError(t, err)
			return up >= n
		}, "%s up for %ds", s.Addr, n)
	}
}

func addrsOf(servers []*redistest.Server) []string {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// TestQuorumRestartRule shows the Redlock restart rule, which the guard
// now keeps: three of five masters restarted empty while a lock is held,
// and rejoining at once (the test neither waits nor keeps them out).
// Without the guard (masters wrongly declared persistent) a second holder
// gets a majority at once, while the first still believes it holds the
// lock. With it, an attempt in between is refused with an error that
// names the three masters and how long each stays out, and a waiting
// Obtain gets the lock only after the first holder's last Deadline.
func TestQuorumRestartRule(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()

	t.Run("without the guard rejoining at once breaks exclusion", func(t *testing.T) {
		l := newQuorumLocker(t, q.clients(t), locksmith.WithTTL(guardTTL), locksmith.WithRenewInterval(50*time.Millisecond))
		key := uniqueKey(t)
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		lctx := lk.Lease(ctx)
		for _, s := range q.servers[:3] {
			require.NoError(t, s.Restart())
		}
		second, err := newQuorumLocker(t, q.clients(t)).Obtain(ctx, key)
		require.NoError(t, err, "three empty masters make a majority for anyone")
		require.True(t, time.Now().Before(lk.Deadline()), "the first holder still believes it holds the lock")
		<-lctx.Done() // the first holder learns it at its next renewal
		require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
		require.NoError(t, second.Release(ctx))
		_ = lk.Release(ctx)
	})

	t.Run("with the guard rejoining at once keeps it", func(t *testing.T) {
		l := newGuardedQuorum(t, q.clients(t), locksmith.WithTTL(guardTTL), locksmith.WithRenewInterval(50*time.Millisecond))
		key := uniqueKey(t)
		lk := untilCounted(t, l, key)
		lctx := lk.Lease(ctx)
		// So that the two that stay up count at once for the new clients
		// below too, whose first reading proves only uptime_in_seconds-1.
		waitUptime(t, q.servers[3:], 2)
		for _, s := range q.servers[:3] {
			require.NoError(t, s.Restart())
		}
		restarted := time.Now()
		// Another Locker, on new clients, which read the uptimes afresh.
		other := newGuardedQuorum(t, q.clients(t), locksmith.WithTTL(guardTTL))
		_, err := other.Obtain(ctx, key)
		requireOut(t, err, addrsOf(q.servers[:3]), addrsOf(q.servers[3:]))
		// The first Locker, whose pools were warm: it sees the restarts
		// through its new connections.
		_, err = l.Obtain(ctx, uniqueKey(t))
		requireOut(t, err, addrsOf(q.servers[:3]), nil)

		got := obtainInBackground(ctx, other, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		<-lctx.Done()
		require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
		lost := time.Now()
		last := lk.Deadline()
		res := receive(t, got, "the waiter")
		require.NoError(t, res.err)
		require.True(t, res.at.After(last), "second holder at %v, the first held until %v",
			res.at.Sub(restarted), last.Sub(restarted))
		t.Logf("after the restart: first lease lost at %v (its Deadline %v), second holder at %v",
			lost.Sub(restarted).Round(time.Millisecond), last.Sub(restarted).Round(time.Millisecond),
			res.at.Sub(restarted).Round(time.Millisecond))
		require.NoError(t, res.lk.Release(ctx))
		_ = lk.Release(ctx)
	})
}

// TestRestartGuardOneServer: the guard on one server (WithRestartGuard).
// A server that has just started is out (a try-once Obtain fails with an
// error naming it), a waiting Obtain waits it out; restarted empty while
// a lock is held, it is kept out again, and nobody else gets the lock
// before the first holder's last Deadline.
func TestRestartGuardOneServer(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	opts := []locksmith.Option{locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL), locksmith.WithRenewInterval(50 * time.Millisecond)}
	l := newLocker(t, srv.Client(t), opts...)
	key := uniqueKey(t)

	_, err := l.Obtain(ctx, key)
	requireOut(t, err, []string{srv.Addr}, nil)
	// Every kind of hold is refused alike.
	_, err = l.Semaphore(uniqueKey(t), 2).Acquire(ctx)
	requireOut(t, err, []string{srv.Addr}, nil)
	_, err = l.RWMutex(uniqueKey(t)).ObtainWrite(ctx)
	requireOut(t, err, []string{srv.Addr}, nil)
	lk := untilCounted(t, l, key)
	lctx := lk.Lease(ctx)

	require.NoError(t, srv.Restart())
	restarted := time.Now()
	other := newLocker(t, srv.Client(t), opts...)
	_, err = other.Obtain(ctx, key)
	requireOut(t, err, []string{srv.Addr}, nil)

	got := obtainInBackground(ctx, other, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	last := lk.Deadline()
	res := receive(t, got, "the waiter")
	require.NoError(t, res.err)
	require.True(t, res.at.After(last), "second holder at %v, the first held until %v",
		res.at.Sub(restarted), last.Sub(restarted))
	require.NoError(t, res.lk.Release(ctx))
}

// TestRestartSeenThroughPooledConnection: a Locker whose pool is warm
// (idle connections to the old process) must not count a master that
// restarted on the same port: its next acquire runs on a new connection,
// whose OnConnect reads the new process's uptime first, and is refused;
// the lock it may have set there is deleted.
func TestRestartSeenThroughPooledConnection(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	cnt := &counter{}
	c := newClient(t, srv.Options(), []redis.Hook{cnt})
	l := newLocker(t, c, locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL))
	// Try-once calls only: a waiting Obtain would open a pub/sub
	// connection, whose reconnection could read the uptime first.
	eventually(t, 10*time.Second, func() bool {
		lk, err := l.Obtain(ctx, uniqueKey(t))
		if err != nil {
			requireOut(t, err, []string{srv.Addr}, nil)
			return false
		}
		return lk.Release(ctx) == nil
	}, "the guard kept the server out")
	for range 3 {
		lk, err := l.Obtain(ctx, uniqueKey(t))
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}
	require.Positive(t, c.PoolStats().IdleConns, "the pool is warm")

	require.NoError(t, srv.Restart())
	cnt.reset()
	key := uniqueKey(t)
	_, err := l.Obtain(ctx, key)
	requireOut(t, err, []string{srv.Addr}, nil)
	sent := cnt.all()
	t.Logf("sent %v", sent)
	require.Contains(t, sent, "info", "the new connection read the uptime")
	require.Zero(t, srv.Client(t).Exists(ctx, key).Val(), "the refused attempt left its key behind")

	// The same for a set of locks, on a pool warm again: the attempt that
	// ran on the restarted server is refused once its reply is in, and
	// its keys are withdrawn.
	eventually(t, 10*time.Second, func() bool {
		lk, err := l.ObtainAll(ctx, keySet(t, 2))
		if err != nil {
			requireOut(t, err, []string{srv.Addr}, nil)
			return false
		}
		return lk.Release(ctx) == nil
	}, "the guard kept the server out")
	require.Positive(t, c.PoolStats().IdleConns, "the pool is warm")
	require.NoError(t, srv.Restart())
	cnt.reset()
	keys := keySet(t, 2)
	_, err = l.ObtainAll(ctx, keys)
	requireOut(t, err, []string{srv.Addr}, nil)
	require.Contains(t, cnt.all(), "info", "the new connection read the uptime")
	requireAbsent(t, srv.Client(t), keys...)
}

// TestQuorumLeaseSurvivesARestartedMaster: a master that restarts while a
// lease runs is left out of its renewals (they fail, or are not counted);
// the four others are a majority, so the lease goes on, and the restarted
// master does not get the lock back while it is out.
func TestQuorumLeaseSurvivesARestartedMaster(t *testing.T) {
	q := newQuorum(t)
	ctx := t.Context()
	l := newGuardedQuorum(t, q.clients(t), locksmith.WithTTL(guardTTL), locksmith.WithRenewInterval(50*time.Millisecond))
	key := uniqueKey(t)
	// All five count before the lock is taken, so that it is taken on all
	// five (taken while two were still out, it would be on three only,
	// and lost with the restarted one); and up for 2s, so that a new
	// connection to them cannot make them look out.
	waitUptime(t, q.servers, 2)
	lk := untilCounted(t, l, key)
	require.Equal(t, 5, q.holders(t, key, lk.Token()), "taken on every master")
	lctx := lk.Lease(ctx)
	require.NoError(t, q.servers[0].Restart())
	restarted := time.Now()
	// Renewed for more than two TTLs, on the four masters that are up.
	eventually(t, 5*time.Second, func() bool {
		return lk.Deadline().Sub(restarted) > 2*guardTTL
	}, "the lease was not renewed after the restart of one master of five")
	require.NoError(t, lctx.Err())
	// A majority of the five holds it: the four that stayed up, less one
	// whose renewals a loaded machine may have delayed past its TTL (the
	// lease needs only a majority).
	require.GreaterOrEqual(t, q.holders(t, key, lk.Token()), 3)
	require.NoError(t, lk.Release(ctx))
}

// TestPersistentMasterCountsAtOnce: a master that persists every write
// (appendonly yes, appendfsync always), declared with
// WithPersistentMaster, counts at once, also after a restart, and keeps
// its locks across it. Two of three masters persist; all three restart
// at once; the lock held before is still refused to another (the two
// persistent masters hold it), and a new lock is granted at once.
func TestPersistentMasterCountsAtOnce(t *testing.T) {
	durable := []*redistest.Server{
		redistest.New(t, "--appendonly", "yes", "--appendfsync", "always"),
		redistest.New(t, "--appendonly", "yes", "--appendfsync", "always"),
	}
	plain := redistest.New(t)
	servers := append(durable, plain)
	ctx := t.Context()
	var cs []redis.UniversalClient
	for _, s := range servers {
		cs = append(cs, newClient(t, s.Options(), nil))
	}
	opts := []locksmith.Option{locksmith.WithTTL(5 * time.Second),
		locksmith.WithPersistentMaster(durable[0].Addr), locksmith.WithPersistentMaster(durable[1].Addr)}
	l := newGuardedQuorum(t, cs, opts...)
	key := uniqueKey(t)
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err, "the persistent masters count at once, just started")

	for _, s := range servers {
		require.NoError(t, s.Restart())
	}
	for _, s := range durable {
		require.Equal(t, lk.Token(), s.Client(t).Get(ctx, key).Val(), "the lock survived the restart of %s", s.Addr)
	}
	_, err = newGuardedQuorum(t, cs, opts...).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.NotErrorIs(t, err, locksmith.ErrRestarted, "refused because it is held, not because of a restart")
	next, err := l.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err, "the two persistent masters count at once after their restart")
	require.NoError(t, next.Release(ctx))
	require.NoError(t, lk.Release(ctx))
}

// TestRestartGuardCostsNoRoundTrip counts the commands of Obtain and
// Release in the steady state, with the guard and without it (its masters
// declared persistent), on a quorum and on one server: the same.
func TestRestartGuardCostsNoRoundTrip(t *testing.T) {
	q := newQuorum(t)
	srv := redistest.New(t)
	ctx := t.Context()
	const rounds = 20
	measure := func(t *testing.T, guarded bool, quorum bool) (int, []string) {
		t.Helper()
		cnt := &counter{}
		var l *locksmith.Locker
		if quorum {
			var cs []redis.UniversalClient
			for _, s := range q.servers {
				cs = append(cs, newClient(t, s.Options(), []redis.Hook{cnt}))
			}
			if guarded {
				l = newGuardedQuorum(t, cs, locksmith.WithTTL(guardTTL))
			} else {
				l = newQuorumLocker(t, cs, locksmith.WithTTL(guardTTL))
			}
		} else {
			opts := []locksmith.Option{locksmith.WithTTL(guardTTL), locksmith.WithRestartGuard()}
			if !guarded {
				opts = append(opts, locksmith.WithPersistentMaster(srv.Addr))
			}
			l = newLocker(t, newClient(t, srv.Options(), []redis.Hook{cnt}), opts...)
		}
		require.NoError(t, untilCounted(t, l, uniqueKey(t)).Release(ctx))
		lk, err := l.Obtain(ctx, uniqueKey(t)) // the try-once path's scripts, cached
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
		cnt.reset()
		for range rounds {
			lk, err := l.Obtain(ctx, uniqueKey(t))
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
		}
		return cnt.count(), cnt.all()
	}
	for _, quorum := range []bool{true, false} {
		name := map[bool]string{true: "quorum of 5", false: "one server"}[quorum]
		t.Run(name, func(t *testing.T) {
			with, cmds := measure(t, true, quorum)
			without, _ := measure(t, false, quorum)
			t.Logf("%s: %d commands per Obtain+Release with the guard, %d without", name, with/rounds, without/rounds)
			require.NotContains(t, cmds, "info")
			if !quorum {
				require.Equal(t, without, with, "the guard sent more: %v", cmds)
				return
			}
			// A quorum's call to a master that misses its share of the
			// deadline (on a loaded machine) may never be sent, guarded or
			// not, so the counts can differ by those: each must stay within
			// one acquire and one release per master.
			most := rounds * 2 * len(q.servers)
			require.LessOrEqual(t, with, most, "the guard sent more: %v", cmds)
			require.LessOrEqual(t, without, most)
		})
	}
}

// TestRestartGuardOptions: the bounds and where the options go. A TTL
// above the maximum, per call or in a Refresh, is refused before anything
// is sent; the guard's options are the Locker's, refused per call.
func TestRestartGuardOptions(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	cnt := &counter{}
	c := newClient(t, srv.Options(), []redis.Hook{cnt})
	l := newLocker(t, c, locksmith.WithTTL(time.Second), locksmith.WithMaxTTL(2*time.Second))
	for _, opt := range []locksmith.Option{
		locksmith.WithTTL(3 * time.Second),
		locksmith.WithMaxTTL(time.Minute),
		locksmith.WithRestartGuard(),
		locksmith.WithPersistentMaster(srv.Addr),
	} {
		_, err := l.Obtain(ctx, "k", opt)
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	}
	_, err := l.Semaphore("s", 2).Acquire(ctx, locksmith.WithTTL(3*time.Second))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	for _, opts := range [][]locksmith.Option{
		{locksmith.WithTTL(time.Second), locksmith.WithMaxTTL(500 * time.Millisecond)}, // default TTL above the bound
		{locksmith.WithMaxTTL(0)},
		{locksmith.WithPersistentMaster("")},
		{locksmith.WithRestartGuard(), locksmith.WithTTL(time.Minute), locksmith.WithMaxTTL(time.Second)},
	} {
		_, err := newLocker(t, c, opts...).Obtain(ctx, "k")
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument, "%v", opts)
		_, err = newQuorumLocker(t, []redis.UniversalClient{c}, opts...).Obtain(ctx, "k")
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument, "%v", opts)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = newLocker(t, ring, locksmith.WithRestartGuard()).Obtain(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.Zero(t, cnt.count(), "refused calls sent %v", cnt.all())

	// A quorum's bound is its default TTL.
	q := newQuorumLocker(t, []redis.UniversalClient{c}, locksmith.WithTTL(time.Second))
	_, err = q.Obtain(ctx, "k", locksmith.WithTTL(2*time.Second))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	lk, err := q.Obtain(ctx, uniqueKey(t))
	require.NoError(t, err)
	cnt.reset()
	require.ErrorIs(t, lk.Refresh(ctx, 2*time.Second), locksmith.ErrInvalidArgument)
	require.Zero(t, cnt.count(), "a refused Refresh sent %v", cnt.all())
	require.NoError(t, lk.Refresh(ctx, time.Second))
	require.NoError(t, lk.Release(ctx))
}

// TestRestartGuardKeepsUsersOnConnect: the guard's OnConnect runs after
// the client's own, which still runs on every connection, and a client's
// OnConnect that fails still fails its connection.
func TestRestartGuardKeepsUsersOnConnect(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	calls := 0
	opt := srv.Options()
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		calls++
		return cn.ClientSetName(ctx, "mine").Err()
	}
	c := newClient(t, opt, nil)
	l := newLocker(t, c, locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL))
	require.NoError(t, untilCounted(t, l, uniqueKey(t)).Release(ctx))
	require.Positive(t, calls)
	name, err := c.ClientGetName(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, "mine", name)

	failing := srv.Options()
	failing.OnConnect = func(context.Context, *redis.Conn) error { return errors.New("no") }
	fc := newClient(t, failing, nil)
	_, err = newLocker(t, fc, locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL)).Obtain(ctx, uniqueKey(t))
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
}

// TestRestartGuardWithoutInfo: the guard reads uptimes with INFO. A user
// who may not run it is told on the Locker's first call, before anything
// is written (ErrNoPermission, as for any command the calls need). A user
// who loses the right later, whose new connections cannot read the
// uptime, gets masters that count for nothing, and errors that say why:
// the guard fails closed.
func TestRestartGuardWithoutInfo(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	admin := srv.Client(t)
	setUser := func(rules ...any) {
		require.NoError(t, admin.Do(ctx, append([]any{"ACL", "SETUSER", "guarded", "on", ">pw", "~*", "&*", "+@all"}, rules...)...).Err())
	}
	setUser("-info")
	opt := srv.Options()
	opt.Username, opt.Password = "guarded", "pw"
	key := uniqueKey(t)
	_, err := newLocker(t, newClient(t, opt, nil), locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL)).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.ErrorContains(t, err, "INFO server")
	require.Zero(t, admin.Exists(ctx, key).Val())

	setUser("+info")
	l := newLocker(t, newClient(t, opt, nil), locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL))
	require.NoError(t, untilCounted(t, l, uniqueKey(t)).Release(ctx))
	setUser("-info")
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "USER", "guarded").Err())
	for range 2 { // the first on a new connection, the second asks first
		_, err = l.Obtain(ctx, uniqueKey(t))
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, locksmith.ErrRestarted)
		require.ErrorContains(t, err, fmt.Sprintf("master %s does not count until its uptime is read", srv.Addr))
		require.True(t, strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "no permission"), err.Error())
	}
}

// TestRestartGuardSets: the guard keeps a set of locks out of a restarted
// server as it keeps a lock out: ObtainAll is refused while the server
// does not count, and a waiting ObtainAll gets the set only after the
// Deadline of the set held before the restart.
func TestRestartGuardSets(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	opts := []locksmith.Option{locksmith.WithRestartGuard(), locksmith.WithTTL(guardTTL), locksmith.WithRenewInterval(50 * time.Millisecond)}
	l := newLocker(t, srv.Client(t), opts...)
	keys := keySet(t, 2)

	_, err := l.ObtainAll(ctx, keys)
	requireOut(t, err, []string{srv.Addr}, nil)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lk, err := l.ObtainAll(waitCtx, keys, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
	require.NoError(t, err, "the guard kept the server out for over 10s")
	lctx := lk.Lease(ctx)

	require.NoError(t, srv.Restart())
	restarted := time.Now()
	other := newLocker(t, srv.Client(t), opts...)
	_, err = other.ObtainAll(ctx, keys)
	requireOut(t, err, []string{srv.Addr}, nil)

	type outcome struct {
		lk  *locksmith.Lock
		err error
		at  time.Time
	}
	got := make(chan outcome, 1)
	go func() {
		lk, err := other.ObtainAll(ctx, keys, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		got <- outcome{lk, err, time.Now()}
	}()
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), locksmith.ErrLockLost)
	last := lk.Deadline()
	var res outcome
	select {
	case res = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting set was not let in")
	}
	require.NoError(t, res.err)
	require.True(t, res.at.After(last), "second holder at %v, the first held until %v",
		res.at.Sub(restarted), last.Sub(restarted))
	require.NoError(t, res.lk.Release(ctx))
}
