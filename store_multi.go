package locksmith

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store of a set of locks taken at once (Locker.ObtainAll): one
// server, Sentinel or keys of one Cluster slot, each call one script over
// every key of the set. A quorum has no extras, so it serves no sets.
//
// On Redis Cluster the acquire and the release name keys that may not
// exist (a free key, an expired one), so, like the single-key scripts
// that name a queue, they go to the slot's master through its own client
// and, when the cluster refuses that, through the cluster client (see
// viaMaster).

// lockSet is a set of locks held (or being taken) with one token: the
// keys as the caller gave them, deduplicated and sorted, and what the
// scripts name for each, in the same order.
type lockSet struct {
	keys     []string
	lockKeys []any // prefix+key
	fences   []any // the fence counters; nil without fencing
	channels []any // the release channels
	// fenceOf is each key's fencing token once the set is held; nil
	// without fencing. Written before the handle is returned, read only.
	fenceOf map[string]int64
}

// lockSetStore is what the handle of a set runs on: the store of its
// deployment and the set. It never hands a key over to a queued waiter.
type lockSetStore struct {
	s   redisStore
	set *lockSet
}

var _ handleStore = lockSetStore{}

// setHandles returns what the handle of set runs on.
func (s redisStore) setHandles(set *lockSet) handleStore { return lockSetStore{s: s, set: set} }

// acquireSet runs one attempt to take every lock of set with token: ok
// with each key's fence, or, when a key is held by another token, that
// key's index and its holder's remaining TTL (negative when it has no
// expiry). An error may have landed: part of the set may hold the token.
func (s redisStore) acquireSet(ctx context.Context, set *lockSet, token any, ttlMS, fenceTTLMS any) (setRes, error) {
	n := len(set.lockKeys)
	args := make([]any, 3, 3+2*n+4)
	args = append(args, set.lockKeys...)
	args = append(args, set.fences...)
	args[2] = len(args) - 3
	args = append(args, token, ttlMS, fenceTTLMS, n)
	multiObtainLua.prepare(args)
	v, err := viaMaster(ctx, s, set.lockKeys[0].(string), func(c redis.UniversalClient) ([]int64, error) {
		return multiObtainLua.send(ctx, c, args).Int64Slice()
	}, func() ([]int64, error) {
		return multiObtainLua.send(ctx, s.client, args).Int64Slice()
	})
	if err != nil {
		return setRes{}, landedError{err}
	}
	switch {
	case len(v) == 2 && v[0] >= 1 && int(v[0]) <= n && v[1] < 0:
		return setRes{held: int(v[0]) - 1, holderTTL: time.Duration(-2-v[1]) * time.Millisecond}, nil
	case len(v) == n+1 && v[0] == 0:
		return setRes{ok: true, fences: v[1:]}, nil
	}
	return setRes{}, landedError{fmt.Errorf("%w: %v from the multi-key acquire script", errBadReply, v)}
}

// setRes is the outcome of one attempt on a set: ok with the fence of
// each key (0 without fencing), in the set's order; or not, with the
// index of a key held by another owner and that holder's remaining TTL.
type setRes struct {
	ok        bool
	fences    []int64
	held      int
	holderTTL time.Duration
}

// release deletes every key of the set that holds the token and
// announces each on its channel; it reports whether every key did.
func (ss lockSetStore) release(ctx context.Context, ref lockRef) (bool, error) {
	set := ss.set
	args := make([]any, 3, 3+2*len(set.lockKeys)+2)
	args = append(args, set.lockKeys...)
	args[2] = len(set.lockKeys)
	args = append(args, ref.token, ss.s.publish())
	args = append(args, set.channels...)
	multiReleaseLua.prepare(args)
	n, err := viaMaster(ctx, ss.s, set.lockKeys[0].(string), func(c redis.UniversalClient) (int64, error) {
		return multiReleaseLua.send(ctx, c, args).Int64()
	}, func() (int64, error) {
		return multiReleaseLua.send(ctx, ss.s.client, args).Int64()
	})
	return err == nil && int(n) == len(set.lockKeys), err
}

// withdraw is release: a set leaves no queue entries.
func (ss lockSetStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return ss.release(ctx, ref)
}

func (ss lockSetStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	res, err := multiRefreshLua.run(ctx, ss.s.client, ss.keysThen(ref.token, ttl.Milliseconds())).Int64()
	return res == 1, err
}

func (ss lockSetStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	res, err := multiPTTLLua.run(ctx, ss.s.client, ss.keysThen(ref.token)).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}

// keysThen lays out a script's arguments: the set's lock keys, then argv.
func (ss lockSetStore) keysThen(argv ...any) []any {
	keys := ss.set.lockKeys
	args := make([]any, 3, 3+len(keys)+len(argv))
	args = append(args, keys...)
	args[2] = len(keys)
	return append(args, argv...)
}
