package locksmith

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// Sets of locks taken at once: ObtainAll and WithLocks, and the set's
// names and slot groups. The call that takes a set is in
// multi_acquire.go, its waiting in multi_wait.go; the scripts are
// multi_*.lua, the store methods store_multi.go.

// ObtainAll acquires the locks on every key of keys at once, or none, and
// returns one handle to all of them: its Release, Refresh, TTL, Deadline
// and Lease cover every key, with the TTL and options of a single
// Obtain. Duplicate keys count once. Keys returns the set, sorted; Key
// returns its first key. With WithFencing, each key takes a fencing token
// of its own counter (the one Obtain on that key uses): FenceOf returns
// it, and Fence returns the highest of them, which is comparable only to
// fences of the key it came from, so pass FenceOf(key) to each resource.
//
// The whole set is taken in one script, one atomic step on one server:
// the script reads every key first and, if any is held by another owner,
// takes nothing. A call that does not wait (NoRetry) then returns an
// error matching ErrNotObtained that names a key that is held, having
// written nothing.
//
// A call that waits (a retry strategy) waits as Obtain does, in the
// handoff queue of each of its keys: the attempt that finds a key taken
// queues the set on every key it does not hold, in the same step, and its
// Locker wakes it on the release of any of them. A release hands its key
// to the first waiter in the key's queue, a set or a single key's, in
// order of arrival, so sets and single-key callers of a key are served
// first come, first served, and a set is not overtaken by callers that
// came after it. A set holds the keys handed to it while it waits for the
// rest, renewing them, and returns once it holds them all. Sets cannot
// deadlock, whatever order they name their keys in: all the entries of a
// set carry the same arrival, the server's clock at its first queued
// attempt, so every queue orders two sets alike, and a set only ever
// waits for a key held by a set that arrived before it (or by a
// single-key holder, which waits for nothing); the set that arrived first
// among those waiting gets every key it waits for. The waiting is also
// bounded by the strategy, as Obtain's: ObtainAll returns an error
// matching ErrNotObtained, naming a key that is held, when the strategy
// gives up, and one matching both ErrNotObtained and ctx.Err() when ctx
// ends; the set then leaves every queue and hands on the keys it was
// handed.
//
// On Redis Cluster, keys that share a hash slot ("{order:42}:items") are
// taken in one step as above. Keys in several slots are taken one slot
// after the other, in the order of the slots, which is the same for every
// set: the keys of the lowest slot first, then, holding them (and
// renewing them), the next slot's, and so on. A set waiting in one slot
// can only wait for a set that waits in a higher slot, or in the same one
// having arrived first, so such sets cannot deadlock either. Each slot
// costs a round trip of its own, for the obtain and for every Release,
// Refresh, TTL and renewal; give keys that belong together a common hash
// tag.
//
// All or nothing: when ObtainAll returns an error, it holds no key of the
// set and is queued on none. A failure that may have left part of the
// set written (a timeout, a
// dropped connection, ctx ending mid-call, a script refused halfway by an
// ACL rule) is followed by a best-effort release of every key still
// holding the call's token and removal of its queue entries, bounded in
// time (at most 5s; entries left behind lapse within 5s); a reply that
// came after the validity ran out (ErrLockLost) is treated the same way.
// A Locker closed during the call makes it return an error matching
// ErrClosed, holding nothing. Fence counters may have advanced for
// nothing, which keeps fences increasing.
//
// Releasing a set releases each key as Obtain's Release releases one: it
// hands it to the first waiter in its queue, or deletes it, and announces
// which. A set is lost as a whole: once any key is gone or taken, Refresh
// and renewals fail (ErrNotHeld, and the leases end with ErrLockLost), and
// Release releases the keys still held and returns an error matching
// ErrNotHeld.
//
// An empty set, an invalid key, an option that Obtain refuses,
// or any of the following returns an error matching ErrInvalidArgument
// and sends nothing:
//   - A quorum (NewQuorum): the set would have to be taken atomically on a
//     majority of independent servers, and a partial win on each would
//     have to be undone; not supported.
//   - WithReplicas: not supported yet (a set's keys would each need the
//     replicas' acknowledgement, and a set handed over key by key has no
//     one moment at which to wait for it).
//
// With WithRestartGuard, a set is refused on a master out of service as a
// lock is (an error matching ErrNotObtained and ErrRestarted, or a wait
// until the master counts again); on Redis Cluster each slot group is
// checked on its own master.
//
// A set of one key is exactly Obtain on that key. The Locker's observer
// reports a set's events with its keys (Event.Keys), and its tracer with
// its size (Call.SetSize).
func (l *Locker) ObtainAll(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	set, err := l.keySet(keys)
	if err != nil {
		return nil, err
	}
	if len(set) == 1 {
		return l.Obtain(ctx, set[0], opts...)
	}
	cfg, err := l.setConfig(set, opts)
	if err != nil {
		return nil, err
	}
	return l.obtainSet(ctx, set, &cfg)
}

// obtainSet is acquireSet, reported to the observer and the tracer, if
// there are any, as acquire reports a single key's.
func (l *Locker) obtainSet(ctx context.Context, set []string, cfg *config) (*Lock, error) {
	if !l.hooked() {
		lk, _, err := l.acquireSet(ctx, set, cfg)
		return lk, err
	}
	ctx, sp := l.span(ctx, Call{Op: OpObtain, Key: set[0], SetSize: len(set), Prefix: cfg.prefix, Hold: HoldLock})
	start := time.Now()
	lk, tr, err := l.acquireSet(ctx, set, cfg)
	l.obtainedSet(set, cfg.prefix, start, tr, lk, err)
	sp.end(Outcome{Err: err, Attempts: tr.attempts, HandedOver: tr.handedOver})
	return lk, err
}

// WithLocks is WithLock for a set of keys: it obtains every lock of keys
// with ObtainAll (following the options, retry strategy included), runs
// fn with a lease context that renews them all, and releases them all
// when fn returns or panics. The context is cancelled, with a cause
// matching ErrLockLost, as soon as any key of the set is found lost. Its
// results, and the bounds of the release, are those of WithLock. A set of
// one key is exactly WithLock on that key.
func (l *Locker) WithLocks(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	set, err := l.keySet(keys)
	if err != nil {
		return err
	}
	if len(set) == 1 {
		return l.WithLock(ctx, set[0], fn, opts...)
	}
	cfg, err := l.setConfig(set, opts)
	if err != nil {
		return err
	}
	lk, err := l.obtainSet(ctx, set, &cfg)
	if err != nil {
		return err
	}
	_, err = runHeld(ctx, lk, fn, nil)
	return err
}

// Keys returns the keys the lock holds, without the prefix: the set given
// to ObtainAll, sorted and without duplicates, or the one key given to
// Obtain.
func (lk *Lock) Keys() []string {
	if set := lk.set(); set != nil {
		return slices.Clone(set.keys)
	}
	return []string{lk.key}
}

// setKeys returns the keys of the set lk holds, for its events, or nil
// when it holds one lock.
func (lk *Lock) setKeys() []string {
	if set := lk.set(); set != nil {
		return set.keys
	}
	return nil
}

// FenceOf returns the fencing token the lock holds key with: for a set
// from ObtainAll, that key's own; for a lock from Obtain, Fence when key
// is its key. It returns 0 without WithFencing, and for a key the lock
// does not hold.
func (lk *Lock) FenceOf(key string) int64 {
	if set := lk.set(); set != nil {
		return set.fenceOf[key]
	}
	if key == lk.key {
		return lk.fence
	}
	return 0
}

// name is what lk's errors call it: its key, or for a set its keys.
func (lk *Lock) name() any {
	if set := lk.set(); set != nil {
		return set.keys
	}
	return lk.key
}

// set returns the set of locks lk holds, or nil when it holds one lock.
func (lk *Lock) set() *lockSet {
	if ss, ok := lk.store.(*lockSetStore); ok {
		return ss.set
	}
	return nil
}

// keySet checks keys for ObtainAll and returns them sorted, without
// duplicates, in a slice of its own.
func (l *Locker) keySet(keys []string) ([]string, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidArgument)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, err
		}
	}
	set := slices.Clone(keys)
	slices.Sort(set)
	return slices.Compact(set), nil
}

// setConfig resolves the options for ObtainAll on set, of two keys or
// more, and checks that the Locker can take it.
func (l *Locker) setConfig(set []string, opts []Option) (config, error) {
	cfg, err := l.callConfig(set[0], opts)
	switch {
	case err != nil:
		return config{}, err
	case l.extras == nil:
		return config{}, fmt.Errorf("%w: ObtainAll of several keys is not supported on a quorum", ErrInvalidArgument)
	case cfg.replicas > 0:
		return config{}, fmt.Errorf("%w: WithReplicas is not supported by ObtainAll of several keys yet", ErrInvalidArgument)
	}
	return cfg, nil
}

// setToken returns a new token for a set of n locks: a random UUID, a
// slash and n, so that Inspect of any key of the set can tell that its
// holder holds it as part of a set, and of how many keys.
func setToken(n int) string {
	return randomToken() + "/" + strconv.Itoa(n)
}

// newLockSet returns the set of locks on keys, sorted and distinct, with
// cfg.
func newLockSet(keys []string, cfg *config) *lockSet {
	n := len(keys)
	names := 3
	if cfg.fencing {
		names = 4
	}
	// One array for every name of the set, in four parts.
	all := make([]any, names*n)
	set := &lockSet{keys: keys, lockKeys: all[:n:n], queues: all[n : 2*n : 2*n], channels: all[2*n : 3*n : 3*n]}
	if cfg.fencing {
		set.fences = all[3*n:]
	}
	for i, k := range keys {
		set.lockKeys[i] = cfg.prefix + k
		queue, channel := keyslot.Companions(cfg.prefix, k, keyslot.Queue, keyslot.Released)
		set.queues[i], set.channels[i] = queue, channel
		if cfg.fencing {
			set.fences[i] = keyslot.Companion(cfg.prefix, k, keyslot.Fence)
		}
	}
	return set
}

// A setGroup is the keys of a set that share a hash slot, in the set's
// order: a set of their own, and their indices in the whole set.
type setGroup struct {
	set *lockSet
	idx []int
}

// allKeys returns the indices of a set of n keys.
func allKeys(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// slotGroups returns the keys of set (sorted, distinct) by hash slot, in
// the order of their slots, when sharded; nil otherwise (one group of
// every key).
func slotGroups(set *lockSet, cfg *config, sharded bool) []setGroup {
	if !sharded {
		return nil
	}
	all := allKeys(len(set.keys))
	slotOf := func(i int) int { return keyslot.Slot(cfg.prefix + set.keys[i]) }
	slices.SortStableFunc(all, func(a, b int) int { return slotOf(a) - slotOf(b) })
	var groups []setGroup
	for start := 0; start < len(all); {
		end := start + 1
		for end < len(all) && slotOf(all[end]) == slotOf(all[start]) {
			end++
		}
		idx := all[start:end:end]
		keys := make([]string, len(idx))
		for j, i := range idx {
			keys[j] = set.keys[i]
		}
		groups = append(groups, setGroup{set: newLockSet(keys, cfg), idx: idx})
		start = end
	}
	if len(groups) == 1 {
		groups[0].set = set
	} else {
		set.groups = make([]*lockSet, len(groups))
		for i, g := range groups {
			set.groups[i] = g.set
		}
	}
	return groups
}
