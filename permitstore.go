package locksmith

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The store side of semaphores (see semaphore.go): one sorted set per
// semaphore, its permits' tokens scored by their expiry, and the scripts
// that take, renew and give back one permit.

var (
	//go:embed permit_acquire.lua
	permitAcquireSrc string
	//go:embed permit_release.lua
	permitReleaseSrc string
	//go:embed permit_refresh.lua
	permitRefreshSrc string
	//go:embed permit_pttl.lua
	permitPTTLSrc string

	permitAcquireLua = newLuaScript(permitAcquireSrc)
	permitReleaseLua = newLuaScript(permitReleaseSrc)
	permitRefreshLua = newLuaScript(permitRefreshSrc)
	permitPTTLLua    = newLuaScript(permitPTTLSrc)
)

// permitReq is one attempt to take a permit: add token to the semaphore
// with the TTL if fewer than limit unexpired permits are held (or one of
// them is token's), then, with fencing, take the next fencing token.
type permitReq struct {
	lockRef
	ttlMS any // the TTL in whole milliseconds, an int64
	limit int
}

func (s scriptStore) acquirePermit(ctx context.Context, req permitReq) (acquireRes, error) {
	args := make([]any, 4, 9)
	args[3] = req.lockKey
	if req.fenced() {
		args = append(args, req.fence)
	}
	args[2] = len(args) - 3
	args = append(args, req.token, req.ttlMS, req.limit, req.fenceTTLMS)
	res, err := permitAcquireLua.run(ctx, s.client, args).Int64Slice()
	if err != nil {
		// The script may have failed after it added the permit.
		return acquireRes{}, landedError{err}
	}
	switch {
	case len(res) == 2 && res[0] == 0:
		return acquireRes{holderTTL: time.Duration(res[1]) * time.Millisecond}, nil
	case len(res) == 3 && res[0] == 1:
		return acquireRes{ok: true, fence: res[1], more: res[2] > 0}, nil
	}
	return acquireRes{}, landedError{errBadReply}
}

// errBadReply marks a script reply of the wrong shape.
var errBadReply = errors.New("unexpected reply from the permit script")

func (s scriptStore) permits() holdStore { return permitStore{s} }

// permitStore runs a permit handle's operations: see holdStore.
type permitStore struct{ s scriptStore }

func (p permitStore) release(ctx context.Context, ref lockRef) (bool, error) {
	res, err := permitReleaseLua.run(ctx, p.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ref.channel, p.s.publish()}).Int64()
	return res == 1, err
}

// withdraw is release: a semaphore's waiters are not queued in Redis.
func (p permitStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return p.release(ctx, ref)
}

func (p permitStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := permitRefreshLua.run(ctx, p.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ttl.Milliseconds()}).Int64()
	return res == 1, err
}

func (p permitStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := permitPTTLLua.run(ctx, p.s.client, []any{nil, nil, 1, ref.lockKey, ref.token}).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}

var (
	//go:embed permit_inspect.lua
	permitInspectSrc string
	permitInspectLua = newLuaScript(permitInspectSrc)
)

// rawPermits is what a store reads for Semaphore.Inspect.
type rawPermits struct {
	holders  []PermitHolder
	fence    string
	hasFence bool
	// listening is how many connections are subscribed to the
	// semaphore's release channel.
	listening int64
}

func (s scriptStore) inspectPermits(ctx context.Context, k Keys) (rawPermits, error) {
	res, err := permitInspectLua.run(ctx, s.client, []any{nil, nil, 2, k.Lock, k.Fence}).Slice()
	if err != nil {
		return rawPermits{}, err
	}
	if len(res) != 2 {
		return rawPermits{}, errBadReply
	}
	var raw rawPermits
	flat, _ := res[0].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		token, _ := flat[i].(string)
		ms, _ := flat[i+1].(int64)
		if strings.Contains(token, ":") {
			return rawPermits{}, fmt.Errorf("%w: %q is not a semaphore's permit (a read-write lock's hold?)", errOtherKind, token)
		}
		raw.holders = append(raw.holders, PermitHolder{Token: token, TTL: time.Duration(ms) * time.Millisecond})
	}
	raw.fence, raw.hasFence = res[1].(string)
	raw.listening, err = s.listening(ctx, k.Channel)
	return raw, err
}

// listening counts the connections subscribed to channel: on Redis
// Cluster, with sharded pub/sub, as the master of its slot counts them.
func (s scriptStore) listening(ctx context.Context, channel string) (int64, error) {
	if !s.sharded() {
		n, err := s.client.PubSubNumSub(ctx, channel).Result()
		return n[channel], err
	}
	master, err := s.master(ctx, channel)
	if err != nil {
		return 0, err
	}
	n, err := master.PubSubShardNumSub(ctx, channel).Result()
	return n[channel], err
}
