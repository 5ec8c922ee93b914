package locksmith_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// minimalRule is the ACL rule docs/acl.md gives for the library on one
// server (or Sentinel) with the prefix "locksmith:": every test below that
// uses it runs the whole API under exactly this rule.
var minimalRule = []string{
	"resetkeys", "~locksmith:*", "resetchannels", "&locksmith:*", "-@all",
	"+hello", "+auth", "+ping",
	"+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+pexpire", "+pttl",
	"+zadd", "+zrem", "+zrangebyscore", "+zcount", "+time",
	"+publish", "+subscribe", "+unsubscribe",
}

// aclUser makes a user on srv with rules and returns a client logged in as
// it, and an admin client.
func aclUser(t *testing.T, srv *redistest.Server, rules ...string) (user, admin *redis.Client) {
	t.Helper()
	admin = newClient(t, srv.Options(), nil)
	name := strings.ReplaceAll(uniqueKey(t), ":", "-")
	args := append([]any{"acl", "setuser", name, "reset", "on", ">pw"}, toAny(rules)...)
	require.NoError(t, admin.Do(t.Context(), args...).Err())
	opt := srv.Options()
	opt.Username, opt.Password = name, "pw"
	return newClient(t, opt, nil), admin
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// setRules changes the rules of the user that c logs in as.
func setRules(t *testing.T, admin, c *redis.Client, rules ...string) {
	t.Helper()
	args := append([]any{"acl", "setuser", c.Options().Username}, toAny(rules)...)
	require.NoError(t, admin.Do(t.Context(), args...).Err())
}

// waiterGetsIt starts a waiting Obtain of held's key on w, waits until it
// is queued, releases held, and checks that the waiter gets the lock (and
// releases it).
func waiterGetsIt(t *testing.T, admin redis.UniversalClient, w *locksmith.Locker, held *locksmith.Lock) {
	t.Helper()
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		lk, err := w.Obtain(ctx, held.Key(), locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	k, err := w.Keys(held.Key())
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, k.Queue).Val() == 1 }, "the waiter queued")
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
}

// exerciseAPI runs every call of the API as a user of client would, and
// fails t if any of them fails.
func exerciseAPI(t *testing.T, client, admin redis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	l := newLocker(t, client, locksmith.WithPrefix("locksmith:"), locksmith.WithTTL(5*time.Second))
	key := uniqueKey(t)

	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	ttl, err := lk.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.NoError(t, lk.Refresh(ctx, 6*time.Second))
	st, err := l.Inspect(ctx, key)
	require.NoError(t, err)
	require.True(t, st.Held)

	// A waiter of another Locker is handed the lock.
	other := newLocker(t, client, locksmith.WithPrefix("locksmith:"), locksmith.WithTTL(5*time.Second))
	waiterGetsIt(t, admin, other, lk)
	k, err := l.Keys(key)
	require.NoError(t, err)

	require.NoError(t, l.WithLock(ctx, key, func(ctx context.Context) error { return nil }, locksmith.WithFencing()))
	fenced, err := l.Obtain(ctx, key, locksmith.WithFencing(), locksmith.WithFenceTTL(time.Minute))
	require.NoError(t, err)
	require.Positive(t, fenced.Fence())
	require.NoError(t, fenced.Release(ctx))

	ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, ran)
	_, done, err := l.Completed(ctx, key)
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, l.Check(ctx))
	require.Zero(t, admin.Exists(ctx, k.Lock).Val(), "the lock is left behind")

	// An election: observed, campaigned for, proclaimed, handed over.
	e := l.Election(key + ":leader")
	changes, err := e.Observe(ctx)
	require.NoError(t, err)
	term, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	nextLeader(t, changes, "a", func(l locksmith.Leader) bool { return l.Value == "a" })
	require.NoError(t, term.Proclaim(ctx, "a2"))
	nextLeader(t, changes, "a2", func(l locksmith.Leader) bool { return l.Value == "a2" })
	got := campaignInBackground(ctx, other.Election(key+":leader"), nil, "b")
	ek, err := l.Keys(key + ":leader")
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, ek.Queue).Val() == 1 }, "the candidate queued")
	require.NoError(t, term.Resign(ctx))
	b := receiveTerm(t, got, "candidate")
	require.NoError(t, b.err)
	nextLeader(t, changes, "b", func(l locksmith.Leader) bool { return l.Value == "b" })
	require.NoError(t, b.term.Resign(ctx))
	require.Zero(t, admin.Exists(ctx, ek.Lock, ek.Queue, ek.Leader).Val(), "the election left keys behind")
}

func TestACLMinimalRule(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, minimalRule...)
	exerciseAPI(t, client, admin)
}

// clusterRule is the minimal rule for Redis Cluster, from docs/acl.md.
var clusterRule = []string{
	"resetkeys", "~locksmith:*", "resetchannels", "&locksmith:*", "-@all",
	"+hello", "+auth", "+ping", "+cluster|slots",
	"+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+pexpire", "+pttl",
	"+zadd", "+zrem", "+zrangebyscore", "+zcount", "+time",
	"+spublish", "+ssubscribe", "+sunsubscribe",
}

func TestACLMinimalRuleCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	name := strings.ReplaceAll(uniqueKey(t), ":", "-")
	for _, addr := range cl.Addrs() {
		node := newClient(t, &redis.Options{Addr: addr}, nil)
		args := append([]any{"acl", "setuser", name, "reset", "on", ">pw"}, toAny(clusterRule)...)
		require.NoError(t, node.Do(t.Context(), args...).Err(), "node %s", addr)
	}
	opt := cl.Options()
	opt.Username, opt.Password = name, "pw"
	client := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	exerciseAPI(t, client, cl.Client(t))
}

// TestACLPrefixScoped runs the API as a user scoped to the prefix, the
// usual production rule.
func TestACLPrefixScoped(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, "~locksmith:*", "&locksmith:*", "+@all", "-@dangerous")
	exerciseAPI(t, client, admin)

	// Outside the prefix: refused before anything is written.
	ctx := t.Context()
	l := newLocker(t, client, locksmith.WithPrefix("other:"))
	_, err := l.Obtain(ctx, "k")
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	require.ErrorIs(t, l.Check(ctx), locksmith.ErrNoPermission)
}

// TestACLNoChannels runs the API as users without channel rights, Redis
// 7's default (acl-pubsub-default resetchannels), or without PUBLISH:
// releases, handoffs and completions succeed, waiters notice releases by
// polling, and Check names what is missing.
func TestACLNoChannels(t *testing.T) {
	srv := redistest.New(t)
	for name, rules := range map[string][]string{
		"resetchannels":       {"~locksmith:*", "resetchannels", "+@all", "-@dangerous"},
		"no publish commands": {"~locksmith:*", "allchannels", "+@all", "-@dangerous", "-publish", "-spublish"},
	} {
		t.Run(name, func(t *testing.T) {
			client, admin := aclUser(t, srv, rules...)
			ctx := t.Context()
			l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
			key := uniqueKey(t)
			lk, err := l.Obtain(ctx, key)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx), "a release whose announcement is refused is done")
			require.Zero(t, admin.Exists(ctx, "locksmith:"+key).Val())

			require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
			ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
			require.NoError(t, err)
			require.True(t, ran)
			_, done, err := l.Completed(ctx, key)
			require.NoError(t, err)
			require.True(t, done)

			// A waiter gets a lock released without an announcement.
			lk, err = l.Obtain(ctx, key)
			require.NoError(t, err)
			waiterGetsIt(t, admin, l, lk)

			err = l.Check(ctx)
			require.ErrorIs(t, err, locksmith.ErrNoPermission)
			require.ErrorContains(t, err, "PUBLISH")
		})
	}
}

// TestACLWithoutScripts: a user that may not run scripts is told so by
// Obtain and Once before anything is written or run.
func TestACLWithoutScripts(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, "~locksmith:*", "&locksmith:*", "+@all", "-@dangerous", "-evalsha", "-eval")
	ctx := t.Context()
	l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
	key := uniqueKey(t)
	_, err := l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	ran := false
	_, err = l.Once(ctx, key, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.False(t, ran, "the job ran although its lock could not be released")
	err = l.WithLock(ctx, key, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.False(t, ran)
	require.Zero(t, admin.Exists(ctx, "locksmith:"+key).Val())
	require.ErrorIs(t, l.Check(ctx), locksmith.ErrNoPermission)

	// Once granted, the next call works: a refusal is not remembered.
	setRules(t, admin, client, "+evalsha", "+eval")
	require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
}

// TestRefusedMidwayLeavesNothing takes rights away after the Locker has
// checked them, so that a script is refused after its SET: the failed
// Obtain must still leave no lock behind.
func TestRefusedMidwayLeavesNothing(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()

	t.Run("fencing without TIME", func(t *testing.T) {
		client, admin := aclUser(t, srv, minimalRule...)
		l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
		key := uniqueKey(t)
		require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }, locksmith.WithFencing()))
		setRules(t, admin, client, "-time")
		_, err := l.Obtain(ctx, key, locksmith.WithFencing())
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		require.Zero(t, admin.Exists(ctx, "locksmith:"+key).Val(), "a token nobody has")
	})

	t.Run("a term's release without TIME", func(t *testing.T) {
		client, admin := aclUser(t, srv, minimalRule...)
		l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
		name := uniqueKey(t)
		term, err := l.Election(name).Campaign(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, term.Proclaim(ctx, "a2"))
		// A candidate queues, so that the release reads the time to hand
		// the term over.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		got := campaignInBackground(cctx, newLocker(t, admin, locksmith.WithPrefix("locksmith:")).Election(name), nil, "b")
		k, err := l.Keys(name)
		require.NoError(t, err)
		eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, k.Queue).Val() == 1 }, "the candidate queued")
		proclaimed := admin.Get(ctx, k.Leader).Val()
		setRules(t, admin, client, "-time")
		require.Error(t, term.Resign(ctx))
		require.Equal(t, term.Token(), admin.Get(ctx, k.Lock).Val(), "the term is still held")
		require.Equal(t, proclaimed, admin.Get(ctx, k.Leader).Val(), "the refused release deleted the proclaimed value")
		require.Equal(t, int64(2), admin.ZCard(ctx, k.Queue).Val(), "the refused release popped the candidate's entry")
		cancel()
		require.ErrorIs(t, receiveTerm(t, got, "candidate").err, locksmith.ErrNotObtained)
	})

	t.Run("waiter without ZREM", func(t *testing.T) {
		client, admin := aclUser(t, srv, minimalRule...)
		l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
		key := uniqueKey(t)
		require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
		// The tutorial's recipe holds the key, from another client.
		rkey := "locksmith:" + key
		require.True(t, admin.SetNX(ctx, rkey, "recipe", 30*time.Second).Val())
		got := make(chan error, 1)
		go func() {
			_, err := l.Obtain(ctx, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
			got <- err
		}()
		k, _ := l.Keys(key)
		eventually(t, 5*time.Second, func() bool { return admin.Exists(ctx, k.Queue).Val() == 1 }, "the waiter queued")
		setRules(t, admin, client, "-zrem")
		require.NoError(t, admin.Del(ctx, rkey).Err())
		err := <-got
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained)
		require.Zero(t, admin.Exists(ctx, rkey).Val(), "a token nobody has")
	})

	// The lock's SPIN model found this one (model/lock.pml,
	// REFUSAL_LIFTS): an obtain whose ZREM of its queue entry is refused
	// after its SET, whose error reply is lost, and which go-redis sends
	// again once the rights are back, finds its own token; it must come
	// back with a fence of its own, not the last holder's.
	t.Run("resent after a refused ZREM", func(t *testing.T) {
		var resend resendOnce
		user, admin := aclUser(t, srv, minimalRule...)
		client := newClient(t, user.Options(), []redis.Hook{&resend})
		l := newLocker(t, client, locksmith.WithPrefix("locksmith:"))
		key := uniqueKey(t)
		first, err := l.Obtain(ctx, key, locksmith.WithFencing())
		require.NoError(t, err)
		require.NoError(t, first.Release(ctx))
		setRules(t, admin, client, "-zrem")
		resend.arm(func() { setRules(t, admin, client, "+zrem") })
		lk, err := l.Obtain(ctx, key, locksmith.WithFencing(), locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		require.NoError(t, err)
		require.True(t, resend.fired(), "the obtain was not resent")
		require.Greater(t, lk.Fence(), first.Fence(), "the resent obtain came back with the last holder's fence")
		require.NoError(t, lk.Release(ctx))
	})
}

// resendOnce, once armed, delivers the next script call twice, as go-redis
// does when a reply is lost: the first reply is dropped, between runs
// between the two deliveries, and the second reply is the call's.
type resendOnce struct {
	mu      sync.Mutex
	between func()
	done    bool
}

func (r *resendOnce) arm(between func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.between = between
}

func (r *resendOnce) fired() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

func (r *resendOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *resendOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		r.mu.Lock()
		between := r.between
		if between != nil && (name == "evalsha" || name == "eval") {
			r.between = nil
		} else {
			between = nil
		}
		r.mu.Unlock()
		if between == nil {
			return next(ctx, cmd)
		}
		_ = next(ctx, cmd) // the reply that is lost
		between()
		cmd.SetErr(nil)
		err := next(ctx, cmd)
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		return err
	}
}

func (r *resendOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestUnderMaxmemory: with memory full (noeviction), Obtain fails with an
// error and leaves nothing, and a Once whose job filled memory still
// releases its lock.
func TestUnderMaxmemory(t *testing.T) {
	srv := redistest.New(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	ctx := t.Context()
	client := newClient(t, srv.Options(), nil)
	l := newLocker(t, client)
	fill := func() {
		t.Helper()
		big := strings.Repeat("x", 64<<10)
		for i := 0; ; i++ {
			err := client.Set(ctx, "fill:"+uniqueKey(t), big, 0).Err()
			if err != nil {
				require.True(t, redis.HasErrorPrefix(err, "OOM"), "filling: %v", err)
				return
			}
			require.Less(t, i, 1000, "memory never filled")
		}
	}
	free := func() {
		t.Helper()
		for _, k := range client.Keys(ctx, "fill:*").Val() {
			client.Del(ctx, k)
		}
	}

	key := uniqueKey(t)
	ran, err := l.Once(ctx, key, func(context.Context) error { fill(); return nil })
	k, _ := l.Keys(key)
	require.Zero(t, client.Exists(ctx, k.Lock).Val(), "the lock stayed behind")
	// The script deletes the lock first, which Redis never refuses for
	// memory, and a script that has written may go on writing: the record
	// is written although memory is full.
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, int64(1), client.Exists(ctx, k.Done).Val())

	other := uniqueKey(t)
	_, err = l.Obtain(ctx, other)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not someone else's lock")
	require.Zero(t, client.Exists(ctx, other).Val())
	free()
	lk, err := l.Obtain(ctx, other)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
}

// TestPermissionCheckOncePerLocker: the first call of a Locker checks the
// user's permissions (one script), later calls send nothing more, and a
// call that needs more (Once) checks once more.
func TestPermissionCheckOncePerLocker(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	cnt := &counter{}
	l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{cnt}))
	// Load the scripts, so that no NOSCRIPT fallback is counted.
	warm := newLocker(t, srv.Client(t))
	warmUp(t, warm)
	_, err := warm.Once(ctx, uniqueKey(t), func(context.Context) error { return nil })
	require.NoError(t, err)
	key := uniqueKey(t)
	cycle := func() int {
		t.Helper()
		cnt.reset()
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
		return cnt.count()
	}
	require.Equal(t, 3, cycle(), "the first cycle: the check, SET, the release")
	require.Equal(t, 2, cycle(), "later cycles: SET and the release only")
	cnt.reset()
	_, err = l.Once(ctx, key, func(context.Context) error { return nil })
	require.NoError(t, err)
	first := cnt.count()
	cnt.reset()
	_, err = l.Once(ctx, uniqueKey(t), func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, first-1, cnt.count(), "the second Once sends no check")
}

// TestPermissionCheckOnQuorum: a master of a quorum whose user lacks a
// command refuses the call before anything is written on any master.
func TestPermissionCheckOnQuorum(t *testing.T) {
	var clients []redis.UniversalClient
	var admins []*redis.Client
	for i := range 3 {
		srv := redistest.New(t)
		rules := []string{"~*", "&*", "+@all", "-@dangerous"}
		if i == 1 {
			rules = append(rules, "-pexpire")
		}
		c, admin := aclUser(t, srv, rules...)
		clients = append(clients, c)
		admins = append(admins, admin)
	}
	ctx := t.Context()
	l := newQuorumLocker(t, clients)
	key := uniqueKey(t)
	_, err := l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.ErrorContains(t, err, "PEXPIRE")
	require.ErrorContains(t, err, "master 1")
	for i, a := range admins {
		require.Zero(t, a.Exists(ctx, key).Val(), "master %d holds the lock", i)
	}
	require.ErrorIs(t, l.Check(ctx), locksmith.ErrNoPermission)
}

// TestPermissionCheckWithMasterDown: with a master of a quorum down, the
// answer of the others stands, and later calls do not ask again (nor wait
// for the down master each time).
func TestPermissionCheckWithMasterDown(t *testing.T) {
	cnt := &counter{}
	var clients []redis.UniversalClient
	var servers []*redistest.Server
	for range 3 {
		srv := redistest.New(t)
		opt := srv.Options()
		opt.ContextTimeoutEnabled, opt.MaxRetries, opt.DialTimeout = true, -1, 200*time.Millisecond
		clients = append(clients, newClient(t, opt, []redis.Hook{cnt}))
		servers = append(servers, srv)
	}
	servers[2].Stop()
	ctx := t.Context()
	l := newQuorumLocker(t, clients)
	key := uniqueKey(t)
	cycle := func() {
		t.Helper()
		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}
	cycle()
	cnt.reset()
	cycle()
	scripts := 0
	for _, name := range cnt.all() {
		if name == "evalsha" || name == "eval" {
			scripts++
		}
	}
	// Try-once attempts are a script too (lock_try.lua): one per master, then
	// the release; a check would add one more per master.
	require.Equal(t, 6, scripts, "the second cycle sends the attempt and the release to each master and no check: %v", cnt.all())
}

// semaphoreRule is what semaphores and read-write locks need beyond the
// lock's minimal rule, from docs/acl.md.
var semaphoreRule = []string{"+zremrangebyscore", "+zscore", "+zcard", "+zrange", "+pexpireat"}

// exerciseSemaphore runs the semaphore's API as client.
func exerciseSemaphore(t *testing.T, client, admin redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := uniqueKey(t)
	l := newLocker(t, client, locksmith.WithPrefix("locksmith:"), locksmith.WithTTL(5*time.Second))
	sem := l.Semaphore(key, 1)
	p, err := sem.Acquire(ctx, locksmith.WithFencing())
	require.NoError(t, err)
	require.Positive(t, p.Fence())
	ttl, err := p.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.NoError(t, p.Refresh(ctx, 6*time.Second))

	// A waiter of another Locker gets the permit once it is given back.
	other := newLocker(t, client, locksmith.WithPrefix("locksmith:"), locksmith.WithTTL(5*time.Second)).Semaphore(key, 1)
	got := make(chan error, 1)
	go func() {
		got <- other.WithPermit(ctx, func(context.Context) error { return nil },
			locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	}()
	require.NoError(t, p.Release(ctx))
	require.NoError(t, <-got)
	require.Zero(t, admin.Exists(ctx, "locksmith:"+key).Val(), "a permit is left behind")

	// A read-write lock needs the same commands.
	rw := l.RWMutex(key + "-rw")
	r, err := rw.ObtainRead(ctx, locksmith.WithFencing())
	require.NoError(t, err)
	require.NoError(t, r.Refresh(ctx, 6*time.Second))
	writer := make(chan error, 1)
	go func() {
		writer <- newLocker(t, client, locksmith.WithPrefix("locksmith:")).RWMutex(key+"-rw").WithWriteLock(ctx,
			func(context.Context) error { return nil }, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	}()
	eventually(t, 5*time.Second, func() bool {
		st, err := rw.Inspect(ctx)
		return err == nil && st.WaitingWriters == 1
	}, "the writer's intent")
	require.NoError(t, r.Release(ctx))
	require.NoError(t, <-writer)
	require.Zero(t, admin.Exists(ctx, "locksmith:"+key+"-rw").Val(), "a hold is left behind")
}

func TestACLSemaphoreRule(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, append(slices.Clone(minimalRule), semaphoreRule...)...)
	exerciseSemaphore(t, client, admin)
}

func TestACLSemaphoreRuleCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	name := strings.ReplaceAll(uniqueKey(t), ":", "-")
	for _, addr := range cl.Addrs() {
		node := newClient(t, &redis.Options{Addr: addr}, nil)
		args := append([]any{"acl", "setuser", name, "reset", "on", ">pw"}, toAny(append(slices.Clone(clusterRule), semaphoreRule...))...)
		require.NoError(t, node.Do(t.Context(), args...).Err(), "node %s", addr)
	}
	opt := cl.Options()
	opt.Username, opt.Password = name, "pw"
	client := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	exerciseSemaphore(t, client, cl.Client(t))
}

// TestACLSemaphoreRefused: a user that may not run one of the
// semaphore's commands is told so before anything is written.
func TestACLSemaphoreRefused(t *testing.T) {
	srv := redistest.New(t)
	client, admin := aclUser(t, srv, append(slices.Clone(minimalRule), "+zremrangebyscore", "+zscore", "+zrange", "+pexpireat")...)
	key := uniqueKey(t)
	sem := newLocker(t, client, locksmith.WithPrefix("locksmith:")).Semaphore(key, 2)
	_, err := sem.Acquire(t.Context())
	require.ErrorIs(t, err, locksmith.ErrNoPermission)
	require.ErrorContains(t, err, "ZCARD locksmith:"+key)
	require.Zero(t, admin.Exists(t.Context(), "locksmith:"+key).Val())
}

// TestACLSemaphoreInspectWithoutNumsub: a user without PUBSUB NUMSUB still
// inspects a semaphore; only the count of waiting processes is unknown.
func TestACLSemaphoreInspectWithoutNumsub(t *testing.T) {
	srv := redistest.New(t)
	client, _ := aclUser(t, srv, append(slices.Clone(minimalRule), semaphoreRule...)...)
	sem := newLocker(t, client, locksmith.WithPrefix("locksmith:")).Semaphore(uniqueKey(t), 2)
	p, err := sem.Acquire(t.Context())
	require.NoError(t, err)
	st, err := sem.Inspect(t.Context())
	require.NoError(t, err)
	require.Len(t, st.Holders, 1)
	require.Equal(t, -1, st.Listening)
	require.NoError(t, p.Release(t.Context()))
}

// TestSharedHoldsUnderMaxmemory: with memory full, a semaphore's or a
// read-write lock's acquire is refused as an error (not as a full
// semaphore or a held lock) and leaves nothing; holds taken before can
// still be given back, which frees memory.
func TestSharedHoldsUnderMaxmemory(t *testing.T) {
	srv := redistest.New(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	ctx := t.Context()
	client := newClient(t, srv.Options(), nil)
	l := newLocker(t, client)
	key := uniqueKey(t)
	sem, rw := l.Semaphore(key+":sem", 3), l.RWMutex(key+":rw")
	p, err := sem.Acquire(ctx)
	require.NoError(t, err)
	r, err := rw.ObtainRead(ctx)
	require.NoError(t, err)

	// Big values first, then small ones: a refused big SET frees its
	// buffer, which leaves room for small writes.
	for _, size := range []int{64 << 10, 64} {
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
	_, err = sem.Acquire(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not a full semaphore")
	_, err = rw.ObtainWrite(ctx, locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(10*time.Millisecond), 2)))
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained, "a refused write is not a held lock")
	require.Equal(t, []string{p.Token()}, client.ZRange(ctx, key+":sem", 0, -1).Val(), "a refused acquire left a permit")
	require.Equal(t, []string{"r:" + r.Token()}, client.ZRange(ctx, key+":rw", 0, -1).Val(), "a refused acquire left a hold or an intent")

	require.NoError(t, p.Release(ctx))
	require.NoError(t, r.Release(ctx))
	require.Zero(t, client.Exists(ctx, key+":sem", key+":rw").Val())
}
