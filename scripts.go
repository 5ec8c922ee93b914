package locksmith

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts run with EVALSHA, falling back to EVAL when the server
// answers NOSCRIPT (its script cache was flushed, or it is a new primary
// after a failover), so callers never see that error. Each script touches
// the lock key and its companion keys (see slotKey), all passed in KEYS and
// all in one cluster slot, so it runs on Redis Cluster too.
var (
	//go:embed obtain.lua
	obtainSrc    string
	obtainScript = redis.NewScript(obtainSrc)

	//go:embed release.lua
	releaseSrc string

	//go:embed refresh.lua
	refreshSrc string

	//go:embed pttl.lua
	pttlSrc string
)

// luaScript is a script to run with arguments prepared by the caller, in
// one slice, so that a call builds nothing it has already built: see run.
type luaScript struct {
	src, sha any // the source and its SHA1, as go-redis takes them
}

func newLuaScript(src string) luaScript {
	return luaScript{src: src, sha: redis.NewScript(src).Hash()}
}

var (
	releaseLua = newLuaScript(releaseSrc)
	refreshLua = newLuaScript(refreshSrc)
	pttlLua    = newLuaScript(pttlSrc)
)

// processor is what sends a prepared command: every go-redis client.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run runs the script on c with args, which is laid out as EVALSHA takes
// it with two slots left free at the front: {_, _, number of keys,
// keys..., arguments...}. It sends EVALSHA and, when the server does not
// know the script (its cache was flushed, or it is a new primary), EVAL.
// run fills the free slots; args must not be shared with another call.
func (s luaScript) run(ctx context.Context, c processor, args []any) *redis.Cmd {
	args[0], args[1] = "evalsha", s.sha
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = c.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		args[0], args[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// pttlNotHeld is what pttl.lua returns when the caller does not hold the lock.
const pttlNotHeld = -3

// A store runs the lock primitives against one Redis deployment. Each
// method touches one lock (with its companion keys, in the same cluster
// slot) in one round trip (two when the server first answers NOSCRIPT),
// and reports a Redis failure as an error, never as the lock being held
// or not held. It is the seam behind which other deployments (a quorum of
// independent servers) can stand.
type store interface {
	// acquire runs one attempt to take a lock, as acquireReq describes.
	acquire(ctx context.Context, req acquireReq) (acquireRes, error)
	// release hands the lock to the first of its queued waiters, or
	// deletes it, if it holds the token, announces which to waiters in the
	// same step, and reports whether it did.
	release(ctx context.Context, ref lockRef) (bool, error)
	// withdraw is release for a queued waiter that gives up: when the
	// lock does not hold the token (it was not handed to the waiter),
	// it removes the waiter's queue entry, made with ttlMS.
	withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error)
	// refresh sets the lock's TTL if it holds the token, and reports
	// whether it did.
	refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error)
	// pttl returns the lock's remaining TTL if it holds the token.
	pttl(ctx context.Context, ref lockRef) (ttl time.Duration, held bool, err error)
	// check returns the commands that calls with needs n on the lock
	// named by k need and the connected user may not run, changing
	// nothing; complete is false when some server could not be asked.
	check(ctx context.Context, k Keys, n need) (refused []string, complete bool, err error)
}

// lockRef names one acquisition of a lock to a store: keys[0] is the lock
// key, keys[1], when present, its handoff queue (see handoff.go), and
// keys[2], when present, its fence counter; token is the value that marks
// this acquisition. The token and the lock key (lockKey) are kept as
// interface values because go-redis takes arguments as such: converting
// once per lock, not once per command, saves an allocation per command.
type lockRef struct {
	keys    []string
	lockKey any
	token   any
	// channel is the channel on which the release is announced (a
	// string), and fenceTTLMS how long the fence counter lives after a
	// token was taken, in ms (an int64, 0 for ever).
	channel    any
	fenceTTLMS any
}

// fenced reports whether the lock takes fencing tokens.
func (r *lockRef) fenced() bool { return len(r.keys) > 2 }

// acquireReq is one attempt to take a lock: set keys[0] to token with the
// TTL if it is free (or already holds token), then, if keys[2] is present,
// take the next fencing token from that counter, and, if replicas is not
// zero, wait up to replicaWait for that many replicas to acknowledge. When
// queue is set and the lock is taken, the caller is queued in keys[1] for
// a handoff.
type acquireReq struct {
	lockRef
	ttl         time.Duration
	ttlMS       any // ttl in whole milliseconds, an int64
	replicas    int
	replicaWait time.Duration
	queue       bool
	// mode chooses the commands; the plain ones apply only without
	// fencing or replicas.
	mode acquireMode
}

// acquireMode chooses how an attempt is sent. A plain SET costs the server
// a fraction of what the script costs (about 2µs against 10µs on Redis
// 7.0), but tells less.
type acquireMode int

const (
	// scripted runs the acquire script: one round trip that reports the
	// holder's TTL when the lock is taken.
	scripted acquireMode = iota
	// plainOnce sends SET NX PX GET: one round trip that tells a resend
	// of this very call from another holder, but not the holder's TTL;
	// for callers that will not wait.
	plainOnce
	// plainFirst sends SET NX PX and, when the key is taken, the script:
	// one cheap round trip for a free lock, two for a taken one; for the
	// first attempt of a caller that may wait.
	plainFirst
)

// acquireRes is the outcome of an acquireReq: either ok, with the fence
// (0 without fencing) and the number of replicas that acknowledged, or not,
// with the holder's remaining TTL, negative when its key has no expiry,
// and, for a queued attempt, the holder's token.
type acquireRes struct {
	ok        bool
	fence     int64
	acked     int
	holderTTL time.Duration
	holder    string
}

// scriptStore is the store of a single Redis server, Sentinel group or
// cluster, reached through one go-redis client.
type scriptStore struct {
	client  redis.UniversalClient
	sharded bool // a cluster client: announce with SPUBLISH
}

func newScriptStore(client redis.UniversalClient) scriptStore {
	return scriptStore{client: client, sharded: isSharded(client)}
}

var _ store = scriptStore{}

func (s scriptStore) acquire(ctx context.Context, req acquireReq) (acquireRes, error) {
	if req.replicas == 0 && !req.fenced() {
		switch req.mode {
		case plainOnce:
			return s.acquireOnce(ctx, req)
		case plainFirst:
			return s.acquireFirst(ctx, req)
		}
	}
	if req.queue {
		return s.acquireQueued(ctx, req)
	}
	var (
		res, acked int64
		err        error
	)
	// Only a queued attempt needs the queue key: leave it out, so that on
	// Redis Cluster the script has no key that does not exist, which
	// would have it refused (TRYAGAIN) while the slot migrates.
	if req.fenced() {
		req.keys = []string{req.keys[0], req.keys[2]}
	} else {
		req.keys = req.keys[:1]
	}
	switch {
	case req.replicas == 0:
		res, err = obtainScript.Run(ctx, s.client, req.keys, req.token, req.ttlMS, req.fenceTTLMS).Int64()
	default:
		res, acked, err = s.acquireReplicated(ctx, req)
	}
	if err != nil {
		return acquireRes{}, scriptError{err}
	}
	if res < 0 {
		return acquireRes{holderTTL: time.Duration(-2-res) * time.Millisecond}, nil
	}
	return acquireRes{ok: true, fence: res, acked: int(acked)}, nil
}

// scriptError is the failure of a script, which may come after some of
// its writes: Redis does not undo them (an error reply to a single
// command, by contrast, means it did nothing).
type scriptError struct{ err error }

func (e scriptError) Error() string { return e.err.Error() }
func (e scriptError) Unwrap() error { return e.err }

// acquireQueued runs the acquire script and queues the caller for a
// handoff when the lock is taken.
func (s scriptStore) acquireQueued(ctx context.Context, req acquireReq) (acquireRes, error) {
	entry := queueEntry(req.ttlMS.(int64), req.fenced(), req.token.(string))
	c, err := s.queueClient(ctx, req.keys[0])
	var v any
	if err == nil {
		v, err = obtainScript.Run(ctx, c, req.keys, req.token, req.ttlMS, req.fenceTTLMS, entry, queueEntryLifeMS).Result()
	}
	if s.sharded && clusterRefused(err) {
		// Try without queueing, through the cluster client.
		req.queue = false
		return s.acquire(ctx, req)
	}
	if err != nil {
		return acquireRes{}, scriptError{err}
	}
	switch v := v.(type) {
	case int64:
		return acquireRes{ok: true, fence: v}, nil
	case []any:
		if len(v) == 2 {
			res, ok1 := v[0].(int64)
			holder, ok2 := v[1].(string)
			if ok1 && ok2 && res < 0 {
				return acquireRes{holderTTL: time.Duration(-2-res) * time.Millisecond, holder: holder}, nil
			}
		}
	}
	return acquireRes{}, fmt.Errorf("unexpected reply from the acquire script: %v", v)
}

// acquireOnce takes the lock with SET NX PX, which answers OK when the
// lock was free and is now the caller's. When it was not, a GET tells a
// resend of this very call (go-redis resends a command after a dropped
// connection, and the first delivery may have taken the lock) from
// someone else holding it: one round trip to take a free lock, two to find
// it taken. (SET NX PX GET would tell both in one, but answers a success
// with a nil reply, which go-redis handles as an error, at the cost of
// some twenty allocations.)
func (s scriptStore) acquireOnce(ctx context.Context, req acquireReq) (acquireRes, error) {
	cmd := redis.NewStatusCmd(ctx, "set", req.lockKey, req.token, "px", req.ttlMS, "nx")
	_ = s.client.Process(ctx, cmd)
	switch err := cmd.Err(); {
	case err == nil:
		return acquireRes{ok: true}, nil
	case !errors.Is(err, redis.Nil):
		return acquireRes{}, err
	}
	holder, err := s.client.Get(ctx, req.keys[0]).Result()
	switch {
	case err == nil && holder == req.token:
		return acquireRes{ok: true}, nil
	case err != nil && !errors.Is(err, redis.Nil):
		// The lock may be the caller's: let Obtain clean up.
		return acquireRes{}, scriptError{err}
	}
	return acquireRes{holderTTL: -1}, nil
}

// acquireFirst takes a free lock with SET NX PX. When the key is taken it
// falls back to the script, which tells whether the taker is this very
// call (a resend whose first delivery took it) and reports the holder's
// TTL.
func (s scriptStore) acquireFirst(ctx context.Context, req acquireReq) (acquireRes, error) {
	ok, err := s.client.SetNX(ctx, req.keys[0], req.token, req.ttl).Result()
	switch {
	case err != nil:
		return acquireRes{}, err
	case ok:
		return acquireRes{ok: true}, nil
	}
	req.mode = scripted
	return s.acquire(ctx, req)
}

// acquireReplicated sends the acquire and a WAIT for the replicas in one
// round trip, falling back to EVAL when the server does not know the
// script. It returns the script's reply and the replicas that
// acknowledged.
func (s scriptStore) acquireReplicated(ctx context.Context, req acquireReq) (int64, int64, error) {
	// WAIT counts the replicas of the connection it is sent on, so it must
	// follow the script on the same connection to the lock's master: on a
	// cluster, the pipeline goes to that master's own client (which does
	// not follow MOVED: during a slot's migration this fails closed).
	var client redis.Cmdable = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, req.keys[0])
		if err != nil {
			return 0, 0, err
		}
		client = master
	}
	send := func(eval bool) (*redis.Cmd, *redis.IntCmd) {
		pipe := client.Pipeline()
		var acquire *redis.Cmd
		if eval {
			acquire = obtainScript.Eval(ctx, pipe, req.keys, req.token, req.ttlMS, req.fenceTTLMS)
		} else {
			acquire = obtainScript.EvalSha(ctx, pipe, req.keys, req.token, req.ttlMS, req.fenceTTLMS)
		}
		wait := redis.NewIntCmd(ctx, "wait", req.replicas, req.replicaWait.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx)
		return acquire, wait
	}
	acquire, wait := send(false)
	if redis.HasErrorPrefix(acquire.Err(), "NOSCRIPT") {
		acquire, wait = send(true)
	}
	res, err := acquire.Int64()
	if err != nil {
		return 0, 0, err
	}
	acked, err := wait.Result()
	if err != nil {
		return 0, 0, fmt.Errorf("WAIT for %d replicas: %w", req.replicas, err)
	}
	return res, acked, nil
}

func (s scriptStore) release(ctx context.Context, ref lockRef) (bool, error) {
	return s.releaseQueued(ctx, ref)
}

func (s scriptStore) withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error) {
	ok, err := s.releaseQueued(ctx, ref, queueEntry(ttlMS, ref.fenced(), ref.token.(string)))
	var rerr redis.Error
	if errors.As(err, &rerr) && len(ref.keys) > 1 {
		// Refused, maybe on the queue (an ACL rule): still delete the
		// lock if it is the caller's, with the script over the lock key
		// alone; the entry lapses.
		res, err2 := releaseLua.run(ctx, s.client, s.releaseArgs(ref, 1)).Int64()
		return res == 1, errors.Join(err, err2)
	}
	return ok, err
}

// releaseQueued runs the release script over the lock and its handoff
// queue, with entry, when given, as the waiter's entry to withdraw. If
// Redis Cluster refuses it, it releases the lock alone, without a handoff
// (and without withdrawing an entry, which then lapses).
func (s scriptStore) releaseQueued(ctx context.Context, ref lockRef, entry ...any) (bool, error) {
	c, err := s.queueClient(ctx, ref.keys[0])
	var res int64
	if err == nil {
		res, err = releaseLua.run(ctx, c, s.releaseArgs(ref, len(ref.keys), entry...)).Int64()
	}
	if s.sharded && clusterRefused(err) {
		res, err = releaseLua.run(ctx, s.client, s.releaseArgs(ref, 1)).Int64()
	}
	return res == 1, err
}

// releaseArgs lays out the release script's arguments for run, over the
// first n keys of ref, with entry after them if given.
func (s scriptStore) releaseArgs(ref lockRef, n int, entry ...any) []any {
	args := make([]any, 3, 3+n+4+len(entry))
	args[2] = n
	args = append(args, ref.lockKey)
	for _, k := range ref.keys[1:n] {
		args = append(args, k)
	}
	args = append(args, ref.token, ref.channel, s.publish(), ref.fenceTTLMS)
	return append(args, entry...)
}

// publish returns the command that announces releases: SPUBLISH on Redis
// Cluster, whose sharded channels live in their key's slot, and PUBLISH
// elsewhere.
func (s scriptStore) publish() any {
	if s.sharded {
		return spublishCmd
	}
	return publishCmd
}

// The announcing commands, converted once for go-redis.
var publishCmd, spublishCmd any = "publish", "spublish"

// queueClient returns the client for scripts that name a lock's handoff
// queue: s.client, or on Redis Cluster the client of the master that owns
// key's slot. The cluster client must not send them: while a slot
// migrates, a script naming a key that does not exist (the queue mostly
// does not) is refused with TRYAGAIN, which the cluster client retries on
// other nodes and then marks the master as failing. The master's own
// client returns the refusal, or a redirection once the slot has moved,
// and the caller falls back to a script over the lock key alone, which
// the cluster client sends wherever the key is (see clusterRefused).
func (s scriptStore) queueClient(ctx context.Context, key string) (redis.UniversalClient, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return s.client, nil
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoMaster, err)
	}
	return master, nil
}

// errNoMaster marks a failure to find the master of a slot.
var errNoMaster = errors.New("no master for the lock's slot")

// clusterRefused reports whether err is Redis Cluster refusing a script
// sent to a slot's master by its own client: the slot is migrating
// (TRYAGAIN, ASK), has moved (MOVED), or its master is unknown. A script
// over the lock key alone, through the cluster client, then follows the
// key.
func clusterRefused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errNoMaster) {
		return true
	}
	for _, p := range []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

func (s scriptStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := refreshLua.run(ctx, s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ttl.Milliseconds()}).Int64()
	return res == 1, err
}

func (s scriptStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := pttlLua.run(ctx, s.client, []any{nil, nil, 1, ref.lockKey, ref.token}).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}
