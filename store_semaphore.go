package locksmith

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store side of semaphores (see semaphore.go): one sorted set per
// semaphore, its permits' tokens scored by their expiry, the script that
// takes one and the one that reads them all. Permits are renewed and
// given back by the scripts of every sorted-set hold (store_hold.go).

// permitReq is one attempt to take a permit: add token to the semaphore
// with the TTL if fewer than limit unexpired permits are held (or one of
// them is token's), then, with fencing, take the next fencing token. When
// queue is set and the limit is reached, the caller is queued in the
// semaphore's handoff queue (ref.queue), for a release to hand it a
// permit as it hands a lock (see handoff.go), and a refused attempt
// reports which of peers, the tokens of the caller's fellow waiters, hold
// a permit (see notify.Notifier.PeersQueued).
type permitReq struct {
	lockRef
	ttlMS any // the TTL in whole milliseconds, an int64
	limit int
	queue bool
	peers []string
}

func (s redisStore) acquirePermit(ctx context.Context, req permitReq) (acquireRes, error) {
	if s.guard == nil {
		return s.acquirePermitUnguarded(ctx, req)
	}
	u, res, done, err := s.admit(ctx, &req.lockRef)
	if done {
		return res, err
	}
	res, err = s.acquirePermitUnguarded(ctx, req)
	return s.settleGuarded(ctx, u, &req.lockRef, req.ttlMS, heldAsPermit, res, err)
}

// acquirePermitUnguarded is acquirePermit without the restart guard.
func (s redisStore) acquirePermitUnguarded(ctx context.Context, req permitReq) (acquireRes, error) {
	var (
		res acquireRes
		err error
	)
	if req.queue && req.lockRef.queue != "" {
		res, err = s.acquirePermitQueued(ctx, req)
	} else {
		res, err = s.acquireHold(ctx, permitAcquireLua, req.lockRef, req.ttlMS, req.limit)
	}
	if errors.Is(err, ErrWrongKind) {
		err = fmt.Errorf("%w: the key holds a read-write lock, not a semaphore", err)
	}
	return res, err
}

// acquirePermitQueued is acquirePermit for a caller that waits: the
// script names the handoff queue, so, as for a lock, it goes to the
// slot's master through its own client on Redis Cluster, and an attempt
// the cluster refuses is sent again without queueing (see viaMaster).
func (s redisStore) acquirePermitQueued(ctx context.Context, req permitReq) (acquireRes, error) {
	return viaMaster(ctx, s, req.key, func(c redis.UniversalClient) (acquireRes, error) {
		entry := queueEntry(req.ttlMS.(int64), req.fenced(), req.token.(string))
		return s.acquireHoldOn(ctx, c, permitAcquireLua, req.lockRef, req.ttlMS, req.limit, entry, req.peers...)
	}, func() (acquireRes, error) {
		return s.acquireHold(ctx, permitAcquireLua, req.lockRef, req.ttlMS, req.limit)
	})
}

func (s redisStore) permits() handleStore { return permitHandles{setStore{s}} }

// permitHandles runs the operations of permits' handles: those of every
// sorted-set hold, but a release hands the permit to the first waiter
// queued for one (which confirms it with confirmPermit).
type permitHandles struct{ setStore }

func (h permitHandles) release(ctx context.Context, ref lockRef) (bool, error) {
	return h.releasePermit(ctx, ref, nil)
}

// withdraw takes a waiter's entry out of the handoff queue, and gives
// back the permit if one was handed to it (to the next waiter).
func (h permitHandles) withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error) {
	ok, err := h.releasePermit(ctx, ref, queueEntry(ttlMS, ref.fenced(), ref.token.(string)))
	var rerr redis.Error
	if errors.As(err, &rerr) && ref.queue != "" {
		// Refused, maybe on the queue (an ACL rule): still give back the
		// permit if it is the caller's; the entry lapses.
		ok2, err2 := h.setStore.release(ctx, ref)
		return ok2, errors.Join(err, err2)
	}
	return ok, err
}

// releasePermit runs permit_release.lua for ref, withdrawing entry if it
// is not nil. Without a queue, or when Redis Cluster refuses the script
// (the slot is moving), it gives the permit back without a handoff.
func (h permitHandles) releasePermit(ctx context.Context, ref lockRef, entry any) (bool, error) {
	if ref.queue == "" {
		return h.setStore.release(ctx, ref)
	}
	s := h.s
	args := make([]any, 5, 11)
	args[3], args[4] = ref.lockKey, ref.queue
	if ref.fenced() {
		args = append(args, ref.fence)
	}
	args[2] = len(args) - 3
	args = append(args, ref.token, ref.channel, s.publish(), ref.fenceTTLMS)
	if entry != nil {
		args = append(args, entry)
	}
	return viaMaster(ctx, s, ref.key, func(c redis.UniversalClient) (bool, error) {
		res, err := permitReleaseLua.run(ctx, c, args).Int64()
		return res == 1, err
	}, func() (bool, error) {
		return h.setStore.release(ctx, ref)
	})
}

func (s redisStore) confirmPermit(ctx context.Context, ref lockRef, ttl time.Duration) (bool, int64, error) {
	return s.runConfirm(ctx, permitConfirmLua, ref, ttl)
}

// rawPermits is what a store reads for Semaphore.Inspect.
type rawPermits struct {
	holders  []PermitHolder
	fence    string
	hasFence bool
	queued   int64
	// listening is how many connections are subscribed to the
	// semaphore's release channel.
	listening int64
}

func (s redisStore) inspectPermits(ctx context.Context, k Keys) (rawPermits, error) {
	res, err := permitInspectLua.run(ctx, s.client, []any{nil, nil, 3, k.Lock, k.Fence, k.Queue}).Slice()
	if err != nil {
		return rawPermits{}, err
	}
	if len(res) == 1 && res[0] == int64(-1) {
		return rawPermits{}, fmt.Errorf("%w: the key holds a read-write lock, not a semaphore", ErrWrongKind)
	}
	if len(res) != 3 {
		return rawPermits{}, errBadReply
	}
	var raw rawPermits
	flat, _ := res[0].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		token, _ := flat[i].(string)
		ms, _ := flat[i+1].(int64)
		if strings.Contains(token, ":") {
			return rawPermits{}, fmt.Errorf("%w: %q is not a semaphore's permit (a read-write lock's hold?)", ErrWrongKind, token)
		}
		raw.holders = append(raw.holders, PermitHolder{Token: token, TTL: time.Duration(ms) * time.Millisecond})
	}
	raw.fence, raw.hasFence = res[1].(string)
	raw.queued, _ = res[2].(int64)
	raw.listening, err = s.listening(ctx, k.Channel)
	if redis.HasErrorPrefix(err, "NOPERM") {
		// Counting them takes PUBSUB NUMSUB, which a user confined to
		// the library's commands may not run: unknown, not a failure.
		return raw, nil
	}
	return raw, err
}

// listening counts the connections subscribed to channel: on Redis
// Cluster, with sharded pub/sub, as the master of its slot counts them.
func (s redisStore) listening(ctx context.Context, channel string) (int64, error) {
	if !s.sharded() {
		n, err := s.client.PubSubNumSub(ctx, channel).Result()
		return listeners(n, channel, err)
	}
	master, err := s.master(ctx, channel)
	if err != nil {
		return -1, err
	}
	n, err := master.PubSubShardNumSub(ctx, channel).Result()
	return listeners(n, channel, err)
}

// listeners returns channel's count in a NUMSUB reply, or -1 with err.
func listeners(counts map[string]int64, channel string, err error) (int64, error) {
	if err != nil {
		return -1, err
	}
	return counts[channel], nil
}
