package locksmith

import (
	"context"
	"errors"
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
	queues   []any // the handoff queues; nil on a deployment that does not queue
	fences   []any // the fence counters; nil without fencing
	channels []any // the release channels
	// groups are the set's keys by Redis Cluster hash slot, in the order
	// of their slots, each a set of its own, when the keys are in more
	// than one slot; nil otherwise. The handle's calls run on each group
	// in turn (see lockSetStore).
	groups []*lockSet
	// fenceOf is each key's fencing token once the set is held; nil
	// without fencing. Written before the handle is returned, read only.
	fenceOf map[string]int64
	// handles is what the set's handle runs on (see setHandles), kept
	// here so that handing it out allocates nothing.
	handles lockSetStore
}

// lockSetStore is what the handle of a set runs on: the store of its
// deployment and the set.
type lockSetStore struct {
	s   redisStore
	set *lockSet
}

var _ handleStore = (*lockSetStore)(nil)

// setHandles returns what the handle of set runs on.
func (s redisStore) setHandles(set *lockSet) handleStore {
	set.handles = lockSetStore{s: s, set: set}
	return &set.handles
}

// How an attempt on a set uses the keys' handoff queues (ARGV[5] of
// multi_obtain.lua): not at all (a call that does not wait), only to
// leave them when it wins, or to queue the caller when it loses.
const (
	setUnqueued = "0"
	setLeaves   = "1"
	setQueues   = "2"
)

// modeArg returns mode as the script's argument: a constant converted,
// which allocates nothing, where the string of a field would be copied
// to the heap at each call.
func modeArg(mode string) any {
	switch mode {
	case setUnqueued:
		return setUnqueued
	case setLeaves:
		return setLeaves
	}
	return setQueues
}

// setReq is one attempt on a set: its token, TTL and fence counters'
// TTL; how it uses the queues (setUnqueued, setLeaves, setQueues), its
// queue entry and the caller's arrival, in the server's ms (0 before an
// attempt that queued it).
type setReq struct {
	token, ttlMS, fenceTTLMS any
	mode                     string
	entry                    string
	arrival                  int64
}

// acquireSet runs one attempt to take every lock of set, as req says. An
// error may have landed: part of the set may hold the token, and the
// caller may be queued. With the restart guard, a master out of service
// refuses the attempt, as a key held for as long as it stays out
// (outOfService says why): before it is sent, or, when the restart is
// seen during the call, after it, the set's keys and entries on that
// master withdrawn then.
func (s redisStore) acquireSet(ctx context.Context, set *lockSet, req setReq) (setRes, error) {
	if s.guard == nil {
		return s.acquireSetUnguarded(ctx, set, req)
	}
	key := set.lockKeys[0].(string)
	u, out, err := s.guard.before(ctx, s, key)
	switch {
	case err != nil:
		return setRes{}, err
	case out != nil:
		return setRefusal(out), nil
	}
	res, err := s.acquireSetUnguarded(ctx, set, req)
	if out := s.guard.after(u); out != nil {
		if err == nil && res.ok || err != nil && mayHaveLanded(err) {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCleanupWait)
			ms, _ := req.ttlMS.(int64)
			_, _ = lockSetStore{s: s, set: set}.withdraw(cctx, lockRef{token: req.token}, ms)
			cancel()
		}
		return setRefusal(out), nil
	}
	return res, err
}

// setRefusal is the outcome of an attempt on a set refused for e.
func setRefusal(e *RestartError) setRes {
	r := e.refusal()
	return setRes{holderTTL: r.holderTTL, outOfService: e}
}

// acquireSetUnguarded is acquireSet without the restart guard.
func (s redisStore) acquireSetUnguarded(ctx context.Context, set *lockSet, req setReq) (setRes, error) {
	n := len(set.lockKeys)
	queued := req.mode != setUnqueued
	script := multiObtainLua
	var args []any
	if !queued && len(set.fences) == 0 {
		// A try without queues or fences: the lean script, which takes
		// only the token and the TTL.
		script = multiTryLua
		args = make([]any, 3, 5+n)
		args = append(args, set.lockKeys...)
		args[2] = n
		args = append(args, req.token, req.ttlMS)
	} else {
		args = make([]any, 3, 3+3*n+8)
		args = append(args, set.lockKeys...)
		if queued {
			args = append(args, set.queues...)
		}
		args = append(args, set.fences...)
		args[2] = len(args) - 3
		args = append(args, req.token, req.ttlMS, req.fenceTTLMS, n, modeArg(req.mode))
		if queued {
			args = append(args, req.entry, queueEntryLifeMS, req.arrival)
		}
	}
	script.prepare(args)
	v, err := viaMaster(ctx, s, set.lockKeys[0].(string), func(c redis.UniversalClient) ([]any, error) {
		return script.send(ctx, c, args).Slice()
	}, func() ([]any, error) {
		return script.send(ctx, s.client, args).Slice()
	})
	if err != nil {
		return setRes{}, landedError{err}
	}
	if res, ok := parseSetRes(v, n, queued); ok {
		return res, nil
	}
	return setRes{}, landedError{fmt.Errorf("%w: %v from the multi-key acquire script", errBadReply, v)}
}

// parseSetRes reads the reply of multi_obtain.lua for a set of n keys,
// sent with queues or not, or of multi_try.lua (a reply without queues).
func parseSetRes(v []any, n int, queued bool) (setRes, bool) {
	ints := make([]int64, 0, 3)
	for _, x := range v {
		i, ok := x.(int64)
		if !ok {
			break
		}
		ints = append(ints, i)
	}
	switch {
	case len(v) == n+1 && len(ints) == n+1 && ints[0] <= 0:
		return setRes{ok: true, fences: ints[1:], handed: ints[0] < 0}, true
	case len(ints) < 2 || ints[0] < 1 || int(ints[0]) > n || ints[1] >= 0:
		return setRes{}, false
	}
	res := setRes{held: int(ints[0]) - 1, holderTTL: time.Duration(-2-ints[1]) * time.Millisecond}
	if !queued {
		return res, len(v) == 2
	}
	if len(v) != 6 || len(ints) != 3 {
		return setRes{}, false
	}
	mine, ok1 := v[3].(string)
	lapsed, ok2 := v[4].(int64)
	holder, ok3 := v[5].(string)
	if !ok1 || !ok2 || !ok3 || len(mine) != n {
		return setRes{}, false
	}
	res.arrival, res.lapsed, res.holder = ints[2], lapsed == 1, holder
	res.mine, res.taken = make([]bool, n), make([]bool, n)
	for i := range n {
		res.mine[i], res.taken[i] = mine[i] == '1', mine[i] == '2'
	}
	return res, true
}

// setRes is the outcome of one attempt on a set: ok with the fence of
// each key (0 without fencing), in the set's order; or not, with the
// index of a key held by another owner, that holder's remaining TTL
// (negative when it has no expiry) and, for an attempt with queues, its
// token, which keys hold the caller's token (mine) and which another's
// (taken), the caller's arrival and whether one of its entries had lapsed
// (see multi_obtain.lua). handed is set, with ok, when some keys held the
// caller's token already: handed over, unheard.
type setRes struct {
	ok        bool
	handed    bool
	fences    []int64
	held      int
	holderTTL time.Duration
	holder    string
	mine      []bool
	taken     []bool
	arrival   int64
	lapsed    bool
	// outOfService is set when the restart guard refused the attempt
	// (see acquireSet).
	outOfService *RestartError
}

// eachGroup runs f on the store of each slot group of the set in turn,
// or of the whole set when it has one slot, and reports whether every
// call did, with their errors joined.
func (ss lockSetStore) eachGroup(f func(g lockSetStore) (bool, error)) (bool, error) {
	if ss.set.groups == nil {
		return f(ss)
	}
	all, errs := true, []error(nil)
	for _, g := range ss.set.groups {
		ok, err := f(lockSetStore{s: ss.s, set: g})
		all = all && ok
		errs = append(errs, err)
	}
	return all, errors.Join(errs...)
}

// release releases every key of the set that holds the token, handing
// each to the first live entry of its queue or deleting it, announces
// each on its channel, and reports whether every key did.
func (ss lockSetStore) release(ctx context.Context, ref lockRef) (bool, error) {
	return ss.eachGroup(func(g lockSetStore) (bool, error) { return g.releaseAll(ctx, ref, "") })
}

// withdraw is release for a set that waited: it also removes its entry,
// made with ttlMS, from every queue.
func (ss lockSetStore) withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error) {
	entry := queueEntry(ttlMS, ss.set.fences != nil, ref.token.(string))
	return ss.eachGroup(func(g lockSetStore) (bool, error) { return g.releaseAll(ctx, ref, entry) })
}

// releaseAll runs multi_release.lua for the set's keys held by ref's
// token, removing entry from their queues first unless it is "". When
// the script is refused (an ACL rule on a queue or a fence counter), it
// runs again over the lock keys alone, which deletes the set's keys
// without handing them over; its entries then lapse.
func (ss lockSetStore) releaseAll(ctx context.Context, ref lockRef, entry string) (bool, error) {
	ok, err := ss.releaseKeys(ctx, ref, entry, ss.set.queues != nil)
	if err == nil {
		return ok, nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && ss.set.queues != nil {
		ok2, err2 := ss.releaseKeys(ctx, ref, "", false)
		return ok2, errors.Join(err, err2)
	}
	return ok, err
}

// releaseKeys runs multi_release.lua as releaseAll says, over the queues
// and fence counters too when companions is set, over the lock keys
// alone otherwise.
func (ss lockSetStore) releaseKeys(ctx context.Context, ref lockRef, entry string, companions bool) (bool, error) {
	set := ss.set
	n := len(set.lockKeys)
	var queued any = "0"
	args := make([]any, 3, 3+4*n+5)
	args = append(args, set.lockKeys...)
	if companions {
		queued = "1"
		args = append(args, set.queues...)
		args = append(args, set.fences...)
	}
	args[2] = len(args) - 3
	args = append(args, ref.token, n, queued, entry)
	args = append(args, set.channels...)
	if companions && set.fences != nil {
		args = append(args, ref.fenceTTLMS)
	}
	script := multiReleaseLua
	if ss.s.sharded() {
		script = multiReleaseShardedLua
	}
	script.prepare(args)
	released, err := viaMaster(ctx, ss.s, set.lockKeys[0].(string), func(c redis.UniversalClient) (int64, error) {
		return script.send(ctx, c, args).Int64()
	}, func() (int64, error) {
		return script.send(ctx, ss.s.client, args).Int64()
	})
	return err == nil && int(released) == n, err
}

func (ss lockSetStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	return ss.eachGroup(func(g lockSetStore) (bool, error) {
		res, err := multiRefreshLua.run(ctx, g.s.client, g.keysThen(ref.token, ttl.Milliseconds())).Int64()
		return res == 1, err
	})
}

func (ss lockSetStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	least := time.Duration(-1)
	held, err := ss.eachGroup(func(g lockSetStore) (bool, error) {
		res, err := multiPTTLLua.run(ctx, g.s.client, g.keysThen(ref.token)).Int64()
		if err != nil || res == pttlNotHeld {
			return false, err
		}
		if ttl := time.Duration(res) * time.Millisecond; least < 0 || ttl < least {
			least = ttl
		}
		return true, nil
	})
	if err != nil || !held {
		return 0, false, err
	}
	return least, true, nil
}

// keysThen lays out a script's arguments: the set's lock keys, then argv.
func (ss lockSetStore) keysThen(argv ...any) []any {
	keys := ss.set.lockKeys
	args := make([]any, 3, 3+len(keys)+len(argv))
	args = append(args, keys...)
	args[2] = len(keys)
	return append(args, argv...)
}
