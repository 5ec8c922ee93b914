package locksmith

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// Sets of locks taken at once: ObtainAll and WithLocks. The scripts are
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
// writes nothing. So two calls whose sets overlap never hold part of each
// other's set, whatever order they name their keys in, and cannot
// deadlock; a caller never holds one key while it waits for another.
//
// When a key is held by someone else, ObtainAll follows the retry
// strategy like Obtain does, except that it does not wait in the keys'
// queues: it tries again at the end of each of the strategy's delays, or
// when the holder's remaining TTL runs out if that comes first, and is not
// woken by announced releases. So it is noticed later than a single-key
// waiter would be, and single-key waiters queued on a key are not passed
// over by its release but may be overtaken by a set that tries at the
// right moment. It returns an error matching ErrNotObtained, naming a key
// that is held, when the strategy gives up (at once with NoRetry), and
// one matching both ErrNotObtained and ctx.Err() when ctx ends.
//
// All or nothing: when ObtainAll returns an error, it holds no key of the
// set. A failure that may have left part of the set written (a timeout, a
// dropped connection, ctx ending mid-call, a script refused halfway by an
// ACL rule) is followed by a best-effort delete of every key still
// holding the call's token, bounded in time (at most 5s); a reply that
// came after the validity ran out (ErrLockLost) is treated the same way.
// A Locker closed during the call makes it return an error matching
// ErrClosed, holding nothing. Fence counters may have advanced for
// nothing, which keeps fences increasing.
//
// Releasing a set deletes every key that still holds its token and
// announces each release as Obtain's Release announces a plain one, so
// single-key waiters on those keys wake and try; a key is never handed
// straight to a queued waiter. A set is lost as a whole: once any key is
// gone or taken, Refresh and renewals fail (ErrNotHeld, and the leases
// end with ErrLockLost), and Release deletes the keys still held and
// returns an error matching ErrNotHeld.
//
// An empty set, an invalid key, an option that Obtain refuses,
// or any of the following returns an error matching ErrInvalidArgument
// and sends nothing:
//   - On Redis Cluster, keys in different hash slots: they are not
//     supported yet. Give the keys a common hash tag ("{order:42}:items").
//   - A quorum (NewQuorum): the set would have to be taken atomically on a
//     majority of independent servers, and a partial win on each would
//     have to be undone; not supported.
//   - WithReplicas, and a Locker with WithRestartGuard: not supported yet.
//
// A set of one key is exactly Obtain on that key. The Locker's observer
// and tracer (WithObserver, WithTracer) do not report sets of more yet.
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
	return l.acquireSet(ctx, set, &cfg)
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
	lk, err := l.acquireSet(ctx, set, &cfg)
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
	if ss, ok := lk.store.(lockSetStore); ok {
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
	case cfg.restartGuard:
		return config{}, fmt.Errorf("%w: ObtainAll of several keys is not supported with the restart guard yet", ErrInvalidArgument)
	}
	if l.extras.sharded() {
		slot := keyslot.Slot(cfg.prefix + set[0])
		for _, k := range set[1:] {
			if keyslot.Slot(cfg.prefix+k) != slot {
				return config{}, fmt.Errorf("%w: %q and %q: keys in different hash slots are not supported yet", ErrInvalidArgument, set[0], k)
			}
		}
	}
	return cfg, nil
}

// setToken returns a new token for a set of n locks: a random UUID, a
// slash and n, so that Inspect of any key of the set can tell that its
// holder holds it as part of a set, and of how many keys.
func setToken(n int) string {
	return uuid.NewString() + "/" + strconv.Itoa(n)
}

// newLockSet returns the set of locks on keys, sorted and distinct, with
// cfg.
func newLockSet(keys []string, cfg *config) *lockSet {
	set := &lockSet{keys: keys, lockKeys: make([]any, len(keys)), channels: make([]any, len(keys))}
	if cfg.fencing {
		set.fences = make([]any, len(keys))
	}
	for i, k := range keys {
		set.lockKeys[i] = cfg.prefix + k
		set.channels[i] = keyslot.Companion(cfg.prefix, k, keyslot.Released)
		if cfg.fencing {
			set.fences[i] = keyslot.Companion(cfg.prefix, k, keyslot.Fence)
		}
	}
	return set
}

// acquireSet takes every lock of keys (sorted, distinct, two or more) with
// cfg, trying again as the retry strategy says, as ObtainAll describes.
func (l *Locker) acquireSet(ctx context.Context, keys []string, cfg *config) (*Lock, error) {
	first := keys[0]
	if ctx.Err() != nil {
		return nil, notObtained(ctx, first)
	}
	n := needLock
	if cfg.fencing {
		n |= needFence
	}
	for _, k := range keys {
		if err := l.verifyNeeds(ctx, cfg.prefix, k, n); err != nil {
			return nil, err
		}
	}
	set := newLockSet(keys, cfg)
	token := setToken(len(keys))
	lk := &Lock{key: first, token: token, cfg: *cfg, ttl: cfg.ttl, hold: HoldLock}
	lk.ref = lockRef{key: cfg.prefix + first, lockKey: set.lockKeys[0], token: token, channel: set.channels[0],
		fenceTTLMS: cfg.fenceTTLMS}
	lk.store = l.extras.setHandles(set)

	backoff := newBackoff(cfg.retry)
	closed := l.notify.Context()
	var slotEnd time.Time // the end of the current retry slot; none before the first refusal
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		start := time.Now()
		res, err := l.extras.acquireSet(ctx, set, token, cfg.ttlMS, cfg.fenceTTLMS)
		if err != nil || res.ok {
			return l.settleSet(ctx, lk, start, res, err)
		}
		now := time.Now()
		if !now.Before(slotEnd) {
			d, ok := backoff.Next()
			if !ok {
				return nil, heldElsewhere(keys[res.held])
			}
			slotEnd = now.Add(max(d, 0))
		}
		wakeAt := slotEnd
		if res.holderTTL >= 0 && now.Add(res.holderTTL).Before(wakeAt) {
			wakeAt = now.Add(res.holderTTL)
		}
		timer.Reset(time.Until(wakeAt))
		select {
		case <-ctx.Done():
			return nil, notObtained(ctx, keys[res.held])
		case <-closed.Done():
			return nil, closedErr(first)
		case <-timer.C:
		}
	}
}

// settleSet completes the attempt on lk's set sent at start and answered
// res or err, as settle does for one lock: it deletes what may have
// landed after a failure, and checks that a win is still valid, that ctx
// has not ended and that the Locker is not closed, deleting the set
// otherwise.
func (l *Locker) settleSet(ctx context.Context, lk *Lock, start time.Time, res setRes, err error) (*Lock, error) {
	set, first := lk.set(), lk.key
	if err != nil {
		if mayHaveLanded(err) {
			deleteIfOwned(ctx, lk)
		}
		if ctx.Err() != nil {
			return nil, notObtained(ctx, first)
		}
		return nil, fmt.Errorf("locksmith: obtain %q: %w", set.keys, err)
	}
	cfg := &lk.cfg
	lk.deadline, lk.since = start.Add(cfg.ttl-cfg.driftFor(cfg.ttl)), start
	if cfg.fencing {
		set.fenceOf = make(map[string]int64, len(set.keys))
		for i, k := range set.keys {
			set.fenceOf[k] = res.fences[i]
			lk.fence = max(lk.fence, res.fences[i])
		}
	}
	switch elapsed := time.Since(start); {
	case !time.Now().Before(lk.deadline):
		deleteIfOwned(ctx, lk)
		return nil, fmt.Errorf("%w: the reply obtaining %q took %v, longer than its validity of %v",
			ErrLockLost, set.keys, elapsed, lk.deadline.Sub(start))
	case ctx.Err() != nil:
		deleteIfOwned(ctx, lk)
		return nil, notObtained(ctx, first)
	case l.notify.IsClosed():
		deleteIfOwned(ctx, lk)
		return nil, closedErr(first)
	}
	return lk, nil
}
