package locksmith

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store of one Redis server, Sentinel group or Cluster.

// redisStore is the store of a single Redis server, Sentinel group or
// cluster, reached through one go-redis client.
type redisStore struct {
	topology // on Redis Cluster, announce with SPUBLISH
	// guard keeps masters that restarted recently out of acquires and
	// renewals (see store_guard.go); nil without the restart guard.
	guard *guard
	// renewer renews the leases of its plain locks together (see
	// renewer.go); nil on the masters of a quorum.
	renewer *renewer
}

func (redisStore) allows(usage) error { return nil }

func (redisStore) queues() bool { return true }

// close has nothing to stop: a redisStore starts no goroutines.
func (redisStore) close() {}

func newRedisStore(t topology) redisStore {
	return redisStore{topology: t, renewer: newRenewer(t)}
}

var (
	_ store  = redisStore{}
	_ extras = redisStore{}
)

func (s redisStore) acquire(ctx context.Context, req acquireReq) (acquireRes, error) {
	if s.guard == nil {
		return s.acquireUnguarded(ctx, req)
	}
	u, res, done, err := s.admit(ctx, &req.lockRef)
	if done {
		return res, err
	}
	res, err = s.acquireUnguarded(ctx, req)
	return s.settleGuarded(ctx, u, &req.lockRef, req.ttlMS, heldAsLock, res, err)
}

// acquireUnguarded is acquire without the restart guard.
func (s redisStore) acquireUnguarded(ctx context.Context, req acquireReq) (acquireRes, error) {
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
	switch {
	case req.replicas == 0:
		script, args := obtainCall(&req.lockRef, false, req.token, req.ttlMS, req.fenceTTLMS)
		res, err = script.send(ctx, s.client, args).Int64()
	default:
		res, acked, err = s.acquireReplicated(ctx, req)
	}
	if err != nil {
		return acquireRes{}, landedError{err}
	}
	if res < 0 {
		return acquireRes{holderTTL: time.Duration(-2-res) * time.Millisecond}, nil
	}
	return acquireRes{ok: true, fence: res, acked: int(acked)}, nil
}

// acquireQueued runs the acquire script and queues the caller for a
// handoff when the lock is taken; if Redis Cluster refuses it, it tries
// without queueing, through the cluster client (see viaMaster).
func (s redisStore) acquireQueued(ctx context.Context, req acquireReq) (acquireRes, error) {
	return viaMaster(ctx, s, req.key, func(c redis.UniversalClient) (acquireRes, error) {
		entry := queueEntry(req.ttlMS.(int64), req.fenced(), req.token.(string))
		script, args := obtainCall(&req.lockRef, true, req.token, req.ttlMS, req.fenceTTLMS, entry, queueEntryLifeMS)
		return queuedReply(script.send(ctx, c, args).Result())
	}, func() (acquireRes, error) {
		req.queue = false
		return s.acquireUnguarded(ctx, req)
	})
}

// queuedReply reads the reply of a queued acquire script.
func queuedReply(v any, err error) (acquireRes, error) {
	if err != nil {
		return acquireRes{}, landedError{err}
	}
	switch v := v.(type) {
	case int64:
		return acquireRes{ok: true, fence: v}, nil
	case []any:
		if len(v) == 1 {
			if fence, ok := v[0].(int64); ok && fence >= 0 {
				return acquireRes{ok: true, fence: fence, mine: true}, nil
			}
		}
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

// acquireOnce takes a free lock with SET NX PX, the cheapest command
// there is for it: no script runs on the server, and no reply is nil. When
// the key is taken it reads the holder's token with GET: one holding the
// caller's token is a resend of this very call (go-redis resends a command
// after a dropped connection, and the first delivery may have taken the
// lock), and the lock is the caller's. So a free lock costs one round trip
// and a taken one two.
//
// An error reply to the SET means it did nothing (see mayHaveLanded); an
// error of the GET is marked as landed, as a resent SET may have taken the
// lock before the one that answered nil.
func (s redisStore) acquireOnce(ctx context.Context, req acquireReq) (acquireRes, error) {
	if taken, err := s.setFree(ctx, req); taken || err != nil {
		return acquireRes{ok: taken}, err
	}
	cmd := redis.NewStringCmd(ctx, "get", req.lockKey)
	_ = s.client.Process(ctx, cmd)
	switch holder, err := cmd.Result(); {
	case err == nil && holder == req.token:
		return acquireRes{ok: true}, nil
	case err != nil && !errors.Is(err, redis.Nil):
		return acquireRes{}, landedError{err}
	}
	return acquireRes{holderTTL: -1}, nil
}

// setNXArgs lays out the arguments of req's SET NX PX.
func setNXArgs(req acquireReq) []any {
	return []any{"set", req.lockKey, req.token, "px", req.ttlMS, "nx"}
}

// setFree sends SET NX PX for req and reports whether it took the lock; a
// nil reply (the key is taken) is no error.
func (s redisStore) setFree(ctx context.Context, req acquireReq) (bool, error) {
	args := req.setArgs
	if args == nil {
		args = setNXArgs(req)
	}
	cmd := redis.NewStatusCmd(ctx, args...)
	_ = s.client.Process(ctx, cmd)
	switch err := cmd.Err(); {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	default:
		return false, err
	}
}

// tryArgs lays out lock_try.lua's arguments for req, for tryLua.send.
func tryArgs(req acquireReq) []any {
	return tryLua.prepare([]any{nil, nil, 1, req.lockKey, req.token, req.ttlMS})
}

// tryOnce runs lock_try.lua, one command that takes a free lock or names
// its holder, with its arguments for req laid out by tryArgs, which it
// only reads: the masters of a quorum share them. As in acquireOnce, a
// holder with the caller's token is a resend of this very call. A quorum
// asks each master once, at once: one round trip, taken or not.
//
// An error reply is not marked as landed: the script writes only with its
// first command, whose success it answers at once, so a reply that is an
// error means that it wrote nothing, as for a single command (see
// mayHaveLanded).
func (s redisStore) tryOnce(ctx context.Context, req acquireReq, args []any) (acquireRes, error) {
	if s.guard == nil {
		return s.tryUnguarded(ctx, req, args)
	}
	u, res, done, err := s.admit(ctx, &req.lockRef)
	if done {
		return res, err
	}
	res, err = s.tryUnguarded(ctx, req, args)
	return s.settleGuarded(ctx, u, &req.lockRef, req.ttlMS, heldAsLock, res, err)
}

// tryUnguarded is tryOnce without the restart guard.
func (s redisStore) tryUnguarded(ctx context.Context, req acquireReq, args []any) (acquireRes, error) {
	v, err := tryLua.send(ctx, s.client, args).Result()
	if err != nil {
		return acquireRes{}, err
	}
	switch v := v.(type) {
	case int64:
		if v == 1 {
			return acquireRes{ok: true}, nil
		}
	case string:
		if v == req.token {
			return acquireRes{ok: true}, nil
		}
		return acquireRes{holderTTL: -1}, nil
	}
	return acquireRes{}, fmt.Errorf("%w: %v from the try script", errBadReply, v)
}

// acquireFirst takes a free lock with SET NX PX. When the key is taken it
// falls back to the script, which tells whether the taker is this very
// call (a resend whose first delivery took it) and reports the holder's
// TTL.
func (s redisStore) acquireFirst(ctx context.Context, req acquireReq) (acquireRes, error) {
	if taken, err := s.setFree(ctx, req); taken || err != nil {
		return acquireRes{ok: taken}, err
	}
	req.mode = scripted
	return s.acquireUnguarded(ctx, req)
}

// acquireReplicated sends the acquire and a WAIT for the replicas in one
// round trip, falling back to EVAL when the server does not know the
// script. It returns the script's reply and the replicas that
// acknowledged.
func (s redisStore) acquireReplicated(ctx context.Context, req acquireReq) (int64, int64, error) {
	// WAIT counts the replicas of the connection it is sent on, so it must
	// follow the script on the same connection to the lock's master: on a
	// cluster, the pipeline goes to that master's own client (which does
	// not follow MOVED: during a slot's migration this fails closed).
	client, err := s.master(ctx, req.key)
	if err != nil {
		return 0, 0, err
	}
	script, args := obtainCall(&req.lockRef, false, req.token, req.ttlMS, req.fenceTTLMS)
	var wait *redis.IntCmd
	acquire := script.pipelined(ctx, client, args, func(pipe redis.Pipeliner) {
		wait = redis.NewIntCmd(ctx, "wait", req.replicas, req.replicaWait.Milliseconds())
		_ = pipe.Process(ctx, wait)
	})
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

func (s redisStore) release(ctx context.Context, ref lockRef) (bool, error) {
	return s.releaseQueued(ctx, ref, s.releaseArgs(ref, true))
}

func (s redisStore) withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error) {
	ok, err := s.releaseQueued(ctx, ref, s.releaseArgs(ref, true, queueEntry(ttlMS, ref.fenced(), ref.token.(string))))
	var rerr redis.Error
	if errors.As(err, &rerr) && ref.queue != "" {
		// Refused, maybe on the queue (an ACL rule): still delete the
		// lock if it is the caller's, with the script over the lock key
		// alone; the entry lapses.
		res, err2 := releaseLua.send(ctx, s.client, s.releaseArgs(ref, false)).Int64()
		return res == 1, errors.Join(err, err2)
	}
	return ok, err
}

// releaseQueued runs the release script over the lock and its handoff
// queue with args, laid out by releaseArgs with companions, which it only
// reads: the masters of a quorum share them. If Redis Cluster refuses
// it, it releases the lock alone, without a handoff (and without
// withdrawing an entry, which then lapses).
func (s redisStore) releaseQueued(ctx context.Context, ref lockRef, args []any) (bool, error) {
	return viaMaster(ctx, s, ref.key, func(c redis.UniversalClient) (bool, error) {
		res, err := s.releaseScript().send(ctx, c, args).Int64()
		return res == 1, err
	}, func() (bool, error) {
		res, err := s.releaseScript().send(ctx, s.client, s.releaseArgs(ref, false)).Int64()
		return res == 1, err
	})
}

// releaseArgs lays out the release script's arguments for
// s.releaseScript().send: its KEYS are the lock key and, when companions
// is set, the handoff queue, the fence counter and an election's
// proclaimed value (those the lock has: lock_release.lua takes them in
// that order, each optional after the one before); then the token, the
// channel, the fence counter's TTL when the counter is named, and entry,
// if given.
func (s redisStore) releaseArgs(ref lockRef, companions bool, entry ...any) []any {
	keys := 1 // each companion is optional after the one before
	switch {
	case !companions || ref.queue == "":
	case ref.fence == "":
		keys = 2
	case ref.leader == "":
		keys = 3
	default:
		keys = 4
	}
	fenced := keys >= 3
	n := 3 + keys + 2 + len(entry) // the script's 3, KEYS; token, channel; entry
	if fenced {
		n++ // the counter's TTL
	}
	all := [4]any{ref.lockKey, ref.queue, ref.fence, ref.leader}
	args := append(make([]any, 3, n), all[:keys]...)
	args[2] = keys
	args = append(args, ref.token, ref.channel)
	if fenced {
		args = append(args, ref.fenceTTLMS)
	}
	return s.releaseScript().prepare(append(args, entry...))
}

// releaseScript returns the variant of the release script that announces
// with s.publish().
func (s redisStore) releaseScript() luaScript {
	if s.sharded() {
		return releaseShardedLua
	}
	return releaseLua
}

// publish returns the command that announces releases: SPUBLISH on Redis
// Cluster, whose sharded channels live in their key's slot, and PUBLISH
// elsewhere.
func (s redisStore) publish() any {
	if s.sharded() {
		return spublishCmd
	}
	return publishCmd
}

// The announcing commands, converted once for go-redis.
var publishCmd, spublishCmd any = "publish", "spublish"

func (s redisStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	if s.guard == nil {
		return s.refreshUnguarded(ctx, ref, ttl)
	}
	u, res, done, err := s.admit(ctx, &ref)
	if done {
		if err == nil {
			err = res.outOfService
		}
		return false, err
	}
	ok, err := s.refreshUnguarded(ctx, ref, ttl)
	return s.refreshChecked(u, ok, err)
}

// refreshUnguarded is refresh without the restart guard.
func (s redisStore) refreshUnguarded(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := refreshLua.send(ctx, s.client, refreshArgs(ref, ttl)).Int64()
	return res == 1, err
}

// refreshArgs lays out lock_refresh.lua's arguments for ref with ttl,
// prepared for refreshLua.send (or a pipeline: see renewer.go).
func refreshArgs(ref lockRef, ttl time.Duration) []any {
	if ref.leader != "" {
		return refreshLua.prepare([]any{nil, nil, 2, ref.lockKey, ref.leader, ref.token, ttl.Milliseconds()})
	}
	return refreshLua.prepare([]any{nil, nil, 1, ref.lockKey, ref.token, ttl.Milliseconds()})
}

func (s redisStore) confirm(ctx context.Context, ref lockRef, ttl time.Duration) (bool, int64, error) {
	return s.runConfirm(ctx, confirmLua, ref, ttl)
}

// runConfirm runs script, lock_confirm.lua or permit_confirm.lua, which take
// the same arguments and answer alike, for ref with ttl.
func (s redisStore) runConfirm(ctx context.Context, script luaScript, ref lockRef, ttl time.Duration) (bool, int64, error) {
	args := make([]any, 4, 9)
	args[3] = ref.lockKey
	if ref.fenced() {
		args = append(args, ref.fence)
	}
	args[2] = len(args) - 3
	args = append(args, ref.token, ttl.Milliseconds(), ref.fenceTTLMS)
	res, err := script.run(ctx, s.client, args).Int64Slice()
	switch {
	case err != nil:
		return false, 0, err
	case len(res) == 1 && res[0] == 0:
		return false, 0, nil
	case len(res) == 2 && res[0] == 1:
		return true, res[1], nil
	}
	return false, 0, errBadReply
}

func (s redisStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := pttlLua.run(ctx, s.client, []any{nil, nil, 1, ref.lockKey, ref.token}).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}
