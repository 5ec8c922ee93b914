package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/leakcheck"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the tests that stop Redis cause
	// many on purpose.
	redis.SetLogger(quietLogger{})
	code := m.Run()
	_ = namerClient.Close()
	redistest.StopShared()
	redistest.StopSharedCluster()
	redistest.StopSharedSentinel()
	os.Exit(leakcheck.After(code))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// A backend is a Redis the behaviour tests run against: an in-process
// miniredis, or a real redis-server started by the tests.
type backend struct {
	name string
	// client returns a new client with its own connection pool, closed
	// when the test ends. hooks are added to it.
	client func(t *testing.T, hooks ...redis.Hook) *redis.Client
	// elapse makes d pass on the server's clock: instantly on miniredis,
	// by sleeping on a real server.
	elapse func(t *testing.T, d time.Duration)
}

// eachBackend runs fn as a subtest on miniredis and on a real redis-server.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		m.ClockTTL(true)
		fn(t, backend{
			name: "miniredis",
			client: func(t *testing.T, hooks ...redis.Hook) *redis.Client {
				return newClient(t, &redis.Options{Addr: m.Addr()}, hooks)
			},
			elapse: func(t *testing.T, d time.Duration) { m.FastForward(d) },
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Shared(t)
		fn(t, backend{
			name: "redis",
			client: func(t *testing.T, hooks ...redis.Hook) *redis.Client {
				return newClient(t, srv.Options(), hooks)
			},
			elapse: func(t *testing.T, d time.Duration) { time.Sleep(d) },
		})
	})
}

func newClient(t *testing.T, opt *redis.Options, hooks []redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(opt)
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// warmUp loads the package's scripts into the server's cache, so that
// counted calls see the steady state (EVALSHA answered without a NOSCRIPT
// fallback to EVAL).
func warmUp(t *testing.T, l *locksmith.Locker) {
	t.Helper()
	ctx := t.Context()
	lk, err := l.Obtain(ctx, uniqueKey(t))
	if err != nil {
		t.Fatalf("warm-up Obtain: %v", err)
	}
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("warm-up Refresh: %v", err)
	}
	if _, err := lk.TTL(ctx); err != nil {
		t.Fatalf("warm-up TTL: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("warm-up Release: %v", err)
	}
}

// names returns the Redis names of the lock on key under prefix, as
// Locker.Keys does.
func names(t testing.TB, prefix, key string) locksmith.Keys {
	t.Helper()
	k, err := namer.Keys(key, locksmith.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("Keys(%q, prefix %q): %v", key, prefix, err)
	}
	return k
}

// plainNames is names without a prefix, for keys known to be valid.
func plainNames(key string) locksmith.Keys {
	k, err := namer.Keys(key)
	if err != nil {
		panic(err)
	}
	return k
}

// namer is a Locker for names: Keys sends nothing, so its client never
// connects. TestMain closes the client.
var (
	namerClient = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	namer       = locksmith.New(namerClient)
)

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses, even on a shared server.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("test:%s:%d:%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

// counter is a hook that counts the commands a client sends, by name.
type counter struct {
	mu    sync.Mutex
	names []string
	// answered counts, by name, the commands whose replies have come
	// back (pipelines not included).
	answered map[string]int
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.record(cmd)
		err := next(ctx, cmd)
		c.mu.Lock()
		if c.answered == nil {
			c.answered = map[string]int{}
		}
		c.answered[strings.ToLower(cmd.Name())]++
		c.mu.Unlock()
		return err
	}
}

// answeredOf returns how many commands named name (lower case) have had
// their replies.
func (c *counter) answeredOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered[name]
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) record(cmd redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, strings.ToLower(cmd.Name()))
}

// all returns the names of the commands counted so far, in order, as
// count counts them (without a new connection's handshake).
func (c *counter) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, name := range c.names {
		if name != "hello" && name != "client" {
			names = append(names, name)
		}
	}
	return names
}

// reset forgets the commands counted so far.
func (c *counter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = nil
}

// count returns how many commands were sent; hello and client setinfo
// sent by go-redis when it connects are not counted.
func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, name := range c.names {
		if name != "hello" && name != "client" {
			n++
		}
	}
	return n
}

// countOf returns how many commands named name (lower case) were sent.
func (c *counter) countOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, got := range c.names {
		if got == name {
			n++
		}
	}
	return n
}

// fault is a hook that injects failures into the commands that act on
// locks: script calls and the plain SET of a first acquire.
type fault struct {
	// failScripts makes every such command fail with a network-like error
	// before anything is sent.
	failScripts atomic.Bool
	// loseReply sends script calls but replaces their reply with a
	// network-like error, as when a connection drops after the request
	// went out.
	loseReply atomic.Bool
	// resend sends each script call twice and keeps the second reply, as
	// a client does when it retries a command whose reply it lost.
	resend atomic.Bool
	// slowReply delays the reply of every script call by this many
	// nanoseconds, after the server has executed it.
	slowReply atomic.Int64
}

var errInjected = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected fault")}

func (f *fault) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *fault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if name != "evalsha" && name != "eval" && name != "set" {
			return next(ctx, cmd)
		}
		if d := time.Duration(f.slowReply.Load()); d > 0 {
			defer time.Sleep(d)
		}
		switch {
		case f.failScripts.Load():
			cmd.SetErr(errInjected)
			return errInjected
		case f.loseReply.Load():
			_ = next(ctx, cmd)
			cmd.SetErr(errInjected)
			return errInjected
		case f.resend.Load():
			if err := next(ctx, cmd); err != nil {
				return err
			}
			return next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook applies the same faults to a pipeline that holds a
// script or a SET (lease renewals are pipelined, see renewer.go): the
// whole pipeline fails, as on a broken connection.
func (f *fault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
			name := strings.ToLower(cmd.Name())
			return name == "evalsha" || name == "eval" || name == "set"
		}) {
			return next(ctx, cmds)
		}
		if d := time.Duration(f.slowReply.Load()); d > 0 {
			defer time.Sleep(d)
		}
		fail := func() error {
			for _, cmd := range cmds {
				cmd.SetErr(errInjected)
			}
			return errInjected
		}
		switch {
		case f.failScripts.Load():
			return fail()
		case f.loseReply.Load():
			_ = next(ctx, cmds)
			return fail()
		case f.resend.Load():
			if err := next(ctx, cmds); err != nil {
				return err
			}
			return next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// eventually fails t unless cond becomes true within d, polling.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: "+msg, append([]any{d}, args...)...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitAsleep waits until srv stops answering, as it does once it runs a
// DEBUG SLEEP sent by another client: a PING on a connection of its own
// gets no reply within 20ms.
func waitAsleep(t *testing.T, srv *redistest.Server) {
	t.Helper()
	opt := srv.Options()
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	probe := newClient(t, opt, nil)
	eventually(t, 5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		return probe.Ping(ctx).Err() != nil
	}, "%s did not fall asleep", srv.Addr)
}

// contend runs perLocker goroutines on each Locker, each taking the lock
// on key rounds times with WithLock and holding it for hold, and returns
// how many acquisitions there were and how many of them overlapped
// another holder's.
func contend(t *testing.T, ctx context.Context, lockers []*locksmith.Locker, key string, perLocker, rounds int,
	hold time.Duration, retry locksmith.RetryStrategy) (acquired, overlaps int64) {
	t.Helper()
	var (
		inside, acq, over atomic.Int64
		wg                sync.WaitGroup
	)
	for _, l := range lockers {
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := l.WithLock(ctx, key, func(context.Context) error {
						if inside.Add(1) != 1 {
							over.Add(1)
						}
						acq.Add(1)
						time.Sleep(hold)
						inside.Add(-1)
						return nil
					}, locksmith.WithRetry(retry))
					if err != nil {
						t.Errorf("WithLock: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	return acq.Load(), over.Load()
}

// newLocker is locksmith.New, with the Locker closed when t ends, so that
// no goroutine of it outlives the test.
func newLocker(t testing.TB, client redis.UniversalClient, opts ...locksmith.Option) *locksmith.Locker {
	l := locksmith.New(client, opts...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newQuorumLocker is locksmith.NewQuorum, with the Locker closed when t
// ends, for tests of anything but the restart guard: it declares every
// master persistent (WithPersistentMaster), so that servers the test has
// just started count at once. The guard's tests use newGuardedQuorum.
func newQuorumLocker(t testing.TB, clients []redis.UniversalClient, opts ...locksmith.Option) *locksmith.Locker {
	var all []locksmith.Option
	for _, c := range clients {
		if c, ok := c.(*redis.Client); ok && c != nil {
			all = append(all, locksmith.WithPersistentMaster(c.Options().Addr))
		}
	}
	return newGuardedQuorum(t, clients, append(all, opts...)...)
}

// newGuardedQuorum is locksmith.NewQuorum, with the Locker closed when t
// ends.
func newGuardedQuorum(t testing.TB, clients []redis.UniversalClient, opts ...locksmith.Option) *locksmith.Locker {
	l := locksmith.NewQuorum(clients, opts...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitSubscribed waits until n connections to c subscribe to channel
// (PUBSUB NUMSUB), as a Locker does once one of its Obtain calls waits for
// the lock whose releases are announced there.
func waitSubscribed(t *testing.T, c *redis.Client, channel string, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		got, err := c.PubSubNumSub(t.Context(), channel).Result()
		if err != nil {
			t.Fatalf("PUBSUB NUMSUB %q: %v", channel, err)
		}
		return got[channel] >= n
	}, "%d subscribers to %q", n, channel)
}

// waitShardSubscribed is waitSubscribed on a cluster, where a Locker
// subscribes with sharded pub/sub: it asks the master that serves
// channel's slot now (PUBSUB SHARDNUMSUB).
func waitShardSubscribed(t *testing.T, cl *redistest.Cluster, channel string, n int64) {
	t.Helper()
	ctx := t.Context()
	clients := make(map[*redistest.Server]*redis.Client)
	eventually(t, 5*time.Second, func() bool {
		owner, err := cl.KeyOwner(ctx, channel)
		if err != nil {
			t.Fatalf("owner of %q: %v", channel, err)
		}
		c := clients[owner]
		if c == nil {
			c = owner.Client(t)
			clients[owner] = c
		}
		got, err := c.PubSubShardNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB %q on %s: %v", channel, owner.Addr, err)
		}
		return got[channel] >= n
	}, "%d sharded subscribers to %q", n, channel)
}

// clusterClient returns a new client of cl whose node clients, which
// carry every command the Locker sends, have hooks.
func clusterClient(t *testing.T, cl *redistest.Cluster, hooks ...redis.Hook) *redis.ClusterClient {
	t.Helper()
	cc := cl.Client(t)
	cc.OnNewNode(func(node *redis.Client) {
		for _, h := range hooks {
			node.AddHook(h)
		}
	})
	return cc
}
