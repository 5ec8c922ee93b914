package locksmith

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The store side of read-write locks (see rwmutex.go): one sorted set per
// lock, readers scored by their expiry and the writer and the waiting
// writers' intents by minus theirs, and the scripts that take, renew and
// give back one hold.

var (
	//go:embed rw_acquire.lua
	rwAcquireSrc string
	//go:embed rw_release.lua
	rwReleaseSrc string
	//go:embed rw_refresh.lua
	rwRefreshSrc string
	//go:embed rw_pttl.lua
	rwPTTLSrc string
	//go:embed rw_inspect.lua
	rwInspectSrc string

	rwAcquireLua = newLuaScript(rwAcquireSrc)
	rwReleaseLua = newLuaScript(rwReleaseSrc)
	rwRefreshLua = newLuaScript(rwRefreshSrc)
	rwPTTLLua    = newLuaScript(rwPTTLSrc)
	rwInspectLua = newLuaScript(rwInspectSrc)
)

// rwIntentLifeMS is how long a waiting writer's intent lives unless its
// waiter renews it, as the acquire script takes it: as long as a queued
// waiter's entry for a lock, renewed as often (see handoff.go).
var rwIntentLifeMS any = queueEntryLife.Milliseconds()

// noIntentMS tells the acquire script to leave no intent.
var noIntentMS any = int64(0)

// acquireRW runs one attempt to take the hold ref names (its token is
// the member, "r:" or "w:" and the token), with the TTL; a writer that
// finds the lock taken leaves an intent when intent is set.
func (s scriptStore) acquireRW(ctx context.Context, ref lockRef, ttlMS any, intent bool) (acquireRes, error) {
	life := noIntentMS
	if intent {
		life = rwIntentLifeMS
	}
	args := make([]any, 4, 9)
	args[3] = ref.lockKey
	if ref.fenced() {
		args = append(args, ref.fence)
	}
	args[2] = len(args) - 3
	args = append(args, ref.token, ttlMS, life, ref.fenceTTLMS)
	res, err := rwAcquireLua.run(ctx, s.client, args).Int64Slice()
	if err != nil {
		// The script may have failed after it added the hold.
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

func (s scriptStore) rwHandles() holdStore { return rwStore{s} }

// rwStore runs the operations of a read-write lock's handles: see
// holdStore. A handle's ref.token is its member.
type rwStore struct{ s scriptStore }

func (r rwStore) release(ctx context.Context, ref lockRef) (bool, error) {
	res, err := rwReleaseLua.run(ctx, r.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ref.channel, r.s.publish()}).Int64()
	return res == 1, err
}

// withdraw is release, which also withdraws a writer's intent.
func (r rwStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return r.release(ctx, ref)
}

func (r rwStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := rwRefreshLua.run(ctx, r.s.client, []any{nil, nil, 1, ref.lockKey, ref.token, ttl.Milliseconds()}).Int64()
	return res == 1, err
}

func (r rwStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := rwPTTLLua.run(ctx, r.s.client, []any{nil, nil, 1, ref.lockKey, ref.token}).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}

// errOtherKind marks a key that holds another kind of hold than the one
// inspected: a semaphore's permits where a read-write lock was expected,
// or the other way round.
var errOtherKind = errors.New("another kind of lock is stored there")

// rawRW is what a store reads for RWMutex.Inspect.
type rawRW struct {
	readers  []PermitHolder
	writer   *PermitHolder
	intents  int64
	fence    string
	hasFence bool
}

func (s scriptStore) inspectRW(ctx context.Context, k Keys) (rawRW, error) {
	res, err := rwInspectLua.run(ctx, s.client, []any{nil, nil, 2, k.Lock, k.Fence}).Slice()
	if err != nil {
		return rawRW{}, err
	}
	if len(res) != 3 {
		return rawRW{}, errBadReply
	}
	var raw rawRW
	flat, _ := res[0].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		member, _ := flat[i].(string)
		ms, _ := flat[i+1].(int64)
		h := PermitHolder{Token: member[min(2, len(member)):], TTL: time.Duration(ms) * time.Millisecond}
		switch {
		case strings.HasPrefix(member, "w:"):
			raw.writer = &h
		case strings.HasPrefix(member, "r:"):
			raw.readers = append(raw.readers, h)
		default:
			return rawRW{}, fmt.Errorf("%w: %q is not a member of a read-write lock (a semaphore's permit?)", errOtherKind, member)
		}
	}
	raw.intents, _ = res[1].(int64)
	raw.fence, raw.hasFence = res[2].(string)
	return raw, nil
}
