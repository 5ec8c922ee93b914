package locksmith

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store side of semaphores (see semaphore.go): one sorted set per
// semaphore, its permits' tokens scored by their expiry, the script that
// takes one and the one that reads them all. Permits are renewed and
// given back by the scripts of every sorted-set hold (holdstore.go).

var (
	//go:embed permit_acquire.lua
	permitAcquireSrc string
	//go:embed permit_inspect.lua
	permitInspectSrc string

	permitAcquireLua = newHoldScript(permitAcquireSrc)
	permitInspectLua = newHoldScript(permitInspectSrc)
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
	res, err := s.acquireHold(ctx, permitAcquireLua, req.lockRef, req.ttlMS, req.limit)
	if errors.Is(err, ErrWrongKind) {
		err = fmt.Errorf("%w: the key holds a read-write lock, not a semaphore", err)
	}
	return res, err
}

func (s scriptStore) permits() holdStore { return setStore{s} }

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
			return rawPermits{}, fmt.Errorf("%w: %q is not a semaphore's permit (a read-write lock's hold?)", ErrWrongKind, token)
		}
		raw.holders = append(raw.holders, PermitHolder{Token: token, TTL: time.Duration(ms) * time.Millisecond})
	}
	raw.fence, raw.hasFence = res[1].(string)
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
func (s scriptStore) listening(ctx context.Context, channel string) (int64, error) {
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
