package locksmith

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The store side of read-write locks (see rwmutex.go): one sorted set per
// lock, readers scored by their expiry and the writer and the waiting
// writers' intents by minus theirs, the script that takes a hold and the
// one that reads them all. Holds are renewed and given back by the
// scripts of every sorted-set hold (store_hold.go).

// rwIntentLifeMS is how long a waiting writer's intent lives unless its
// waiter renews it, as the acquire script takes it: as long as a queued
// waiter's entry for a lock, renewed as often (see handoff.go).
var rwIntentLifeMS any = queueEntryLife.Milliseconds()

// noIntentMS tells the acquire script to leave no intent.
var noIntentMS any = int64(0)

// acquireRW runs one attempt to take the hold ref names (its token is
// the member, "r:" or "w:" and the token), with the TTL; a writer that
// finds the lock taken leaves an intent when intent is set.
func (s redisStore) acquireRW(ctx context.Context, ref lockRef, ttlMS any, intent bool) (acquireRes, error) {
	if s.guard == nil {
		return s.acquireRWUnguarded(ctx, ref, ttlMS, intent)
	}
	u, res, done, err := s.admit(ctx, &ref)
	if done {
		return res, err
	}
	res, err = s.acquireRWUnguarded(ctx, ref, ttlMS, intent)
	return s.settleGuarded(ctx, u, &ref, ttlMS, heldAsRW, res, err)
}

// acquireRWUnguarded is acquireRW without the restart guard.
func (s redisStore) acquireRWUnguarded(ctx context.Context, ref lockRef, ttlMS any, intent bool) (acquireRes, error) {
	life := noIntentMS
	if intent {
		life = rwIntentLifeMS
	}
	res, err := s.acquireHold(ctx, rwAcquireLua, ref, ttlMS, life)
	if errors.Is(err, ErrWrongKind) {
		err = fmt.Errorf("%w: the key holds a semaphore, not a read-write lock", err)
	}
	return res, err
}

func (s redisStore) rwHandles() handleStore { return setStore{s} }

// rawRW is what a store reads for RWMutex.Inspect.
type rawRW struct {
	readers  []PermitHolder
	writer   *PermitHolder
	intents  int64
	fence    string
	hasFence bool
}

func (s redisStore) inspectRW(ctx context.Context, k Keys) (rawRW, error) {
	res, err := rwInspectLua.run(ctx, s.client, []any{nil, nil, 2, k.Lock, k.Fence}).Slice()
	if err != nil {
		return rawRW{}, err
	}
	if len(res) == 1 && res[0] == int64(-1) {
		return rawRW{}, fmt.Errorf("%w: the key holds a semaphore, not a read-write lock", ErrWrongKind)
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
			return rawRW{}, fmt.Errorf("%w: %q is not a member of a read-write lock (a semaphore's permit?)", ErrWrongKind, member)
		}
	}
	raw.intents, _ = res[1].(int64)
	raw.fence, raw.hasFence = res[2].(string)
	return raw, nil
}
