package locksmith

import (
	"context"
	"errors"
	"time"
)

// The store side of the holds kept in one sorted set per name: a
// semaphore's permits (store_semaphore.go) and a read-write lock's holds
// (store_rwmutex.go). Each member is a hold, scored by its expiry in
// server milliseconds, or by minus it for a read-write lock's writers; the
// handle scripts serve both.

// errBadReply marks a script reply of the wrong shape.
var errBadReply = errors.New("unexpected reply from a script")

// acquireHold runs script, an acquire script of a sorted-set hold, for
// ref with its arguments: the member (ref.token), the TTL in ms, extra,
// and the fence counter's TTL. The script answers {1, fence, more} (a
// permit's adds whether it was the caller's already: see
// permit_acquire.lua), {0, ms until what stops the caller expires}, or
// {-1} when the key holds another kind of hold (ErrWrongKind).
func (s redisStore) acquireHold(ctx context.Context, script luaScript, ref lockRef, ttlMS, extra any) (acquireRes, error) {
	return s.acquireHoldOn(ctx, s.client, script, ref, ttlMS, extra, "")
}

// acquireHoldOn is acquireHold on c; with an entry, the script also
// queues the caller with it in ref.queue, its last key, when it cannot
// take the hold, and reports which of peers hold one (see
// permit_acquire.lua).
func (s redisStore) acquireHoldOn(ctx context.Context, c processor, script luaScript, ref lockRef, ttlMS, extra any, entry string,
	peers ...string) (acquireRes, error) {
	args := make([]any, 4, 11+len(peers))
	args[3] = ref.lockKey
	if ref.fenced() {
		args = append(args, ref.fence)
	}
	if entry != "" {
		args = append(args, ref.queue)
	}
	args[2] = len(args) - 3
	args = append(args, ref.token, ttlMS, extra, ref.fenceTTLMS)
	if entry != "" {
		args = append(args, entry, queueEntryLifeMS)
		for _, p := range peers {
			args = append(args, p)
		}
	}
	reply, err := script.run(ctx, c, args).Slice()
	if err != nil {
		// The script may have failed after it added the hold.
		return acquireRes{}, landedError{err}
	}
	if len(reply) >= 2 && reply[0] == int64(0) {
		// Refused: the time left, then the peers that hold a permit.
		ms, ok := reply[1].(int64)
		if !ok {
			return acquireRes{}, landedError{errBadReply}
		}
		res := acquireRes{holderTTL: time.Duration(ms) * time.Millisecond}
		for _, p := range reply[2:] {
			if token, ok := p.(string); ok {
				res.peersHolding = append(res.peersHolding, token)
			}
		}
		return res, nil
	}
	var nums [4]int64
	if len(reply) > len(nums) {
		return acquireRes{}, landedError{errBadReply}
	}
	for i, v := range reply {
		n, ok := v.(int64)
		if !ok {
			return acquireRes{}, landedError{errBadReply}
		}
		nums[i] = n
	}
	res := nums[:len(reply)]
	switch {
	case len(res) == 3 && res[0] == 1:
		return acquireRes{ok: true, fence: res[1], more: res[2] > 0}, nil
	case len(res) == 4 && res[0] == 1:
		// A permit's: whether a queued caller found it handed over.
		return acquireRes{ok: true, fence: res[1], more: res[2] > 0, mine: res[3] == 1}, nil
	case len(res) == 1 && res[0] == -1:
		// The script found the other kind's members, and wrote nothing.
		return acquireRes{}, ErrWrongKind
	}
	return acquireRes{}, landedError{errBadReply}
}

// setStore runs the operations of the handles of sorted-set holds: see
// handleStore. A handle's ref.token is its member. A permit is handed
// over by its release (see permitHandles), and confirmed by the store's
// confirmPermit.
type setStore struct{ s redisStore }

func (h setStore) release(ctx context.Context, ref lockRef) (bool, error) {
	res, err := holdReleaseLua.run(ctx, h.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ref.channel, h.s.publish()}).Int64()
	return res == 1, err
}

// withdraw is release: waiters for a read-write lock are not queued in Redis
// (a waiting writer's intent, which the release script also withdraws,
// is the one trace they leave).
func (h setStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return h.release(ctx, ref)
}

func (h setStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := holdRefreshLua.run(ctx, h.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ttl.Milliseconds()}).Int64()
	return res == 1, err
}

func (h setStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := holdPTTLLua.run(ctx, h.s.client, []any{nil, nil, 1, ref.lockKey, ref.token}).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}
