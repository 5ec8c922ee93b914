package locksmith

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/notify"
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
		set.queues[i] = keyslot.Companion(cfg.prefix, k, keyslot.Queue)
		set.channels[i] = keyslot.Companion(cfg.prefix, k, keyslot.Released)
		if cfg.fencing {
			set.fences[i] = keyslot.Companion(cfg.prefix, k, keyslot.Fence)
		}
	}
	return set
}

// acquireSet takes every lock of keys (sorted, distinct, two or more) with
// cfg, waiting as the retry strategy says, as ObtainAll describes.
func (l *Locker) acquireSet(ctx context.Context, keys []string, cfg *config) (*Lock, tries, error) {
	if ctx.Err() != nil {
		return nil, tries{}, notObtained(ctx, keys[0])
	}
	n := needLock | needQueue
	if cfg.fencing {
		n |= needFence
	}
	for _, k := range keys {
		if err := l.verifyNeeds(ctx, cfg.prefix, k, n); err != nil {
			return nil, tries{}, err
		}
	}
	s := newSetAcquisition(l, keys, cfg)
	backoff := newBackoff(cfg.retry)
	delay, wait := backoff.Next()
	var tr tries
	if !wait {
		// One attempt per slot group, in the order of their slots: the
		// first refused one ends the call, releasing the groups before it.
		for {
			start := time.Now()
			won, res, err := s.send(ctx, setUnqueued, start)
			tr.attempts++
			switch {
			case err != nil:
				return nil, tr, err
			case !won:
				if s.holdsAny() {
					deleteIfOwned(ctx, s.lk)
				}
				return nil, tr, s.refused(res)
			}
			if lk, err := s.advance(ctx, start); lk != nil || err != nil {
				return lk, tr, err
			}
		}
	}
	// As a single key's waiter does (see acquire.go), a set that has
	// waiters of this Locker ahead of it on any key joins the queues
	// without trying; otherwise it tries at once, which queues it on
	// every key if it loses.
	tickets, queued := s.tickets()
	if queued {
		s.join(ctx, tickets, acquireRes{}, -1, time.Time{})
		return l.wait(ctx, s, backoff, delay, tr)
	}
	for {
		start := time.Now()
		won, res, err := s.send(ctx, setQueues, start)
		tr.attempts++
		if err != nil {
			return nil, tr, err
		}
		if !won {
			s.join(ctx, tickets, res, s.last.held, start)
			s.learn(start)
			return l.wait(ctx, s, backoff, delay, tr)
		}
		if lk, err := s.advance(ctx, start); lk != nil || err != nil {
			return lk, tr, err
		}
		if tickets, queued = s.tickets(); queued {
			s.join(ctx, tickets, acquireRes{}, -1, time.Time{})
			return l.wait(ctx, s, backoff, delay, tr)
		}
	}
}

// Waiting for a set of locks, the way this package does it:
//
// A set waits in the handoff queue of every key it waits for, as a single
// key's waiter does in one (see acquire.go and handoff.go), and its
// Locker keeps it in its own queue of each of those keys, woken by the
// announcements on any of them. Its attempt is one script step
// (multi_obtain.lua) that takes every key if none is held by another
// owner; otherwise it queues the set on every key it does not hold, all
// with one arrival time, the server's clock at the set's first queued
// attempt (kept in its later attempts). A release hands a key to the
// first live entry of its queue, whether a single key's waiter or a set:
// a set holds each key handed to it while it waits for the rest, renews
// them with its attempts, and has them all when the last one is handed
// over (or its attempt finds the rest free).
//
// Why two sets cannot deadlock: a set holds a key only once a release has
// handed it over, and a release hands a key to the earliest entry of its
// queue. Entries are ordered by arrival, then by entry (a set's entry is
// the same string in each of its queues), and all the entries of a set
// have the same arrival, so two sets are in the same order in every queue
// they share. If set A holds a key that set B waits for, A was ahead of B
// in that queue at the handoff, or B started queueing after it; a set
// that starts queueing for a key held by a set that was handed it takes
// an arrival later than that set's (the release keeps the arrival of the
// set it hands a key to in the queue, for this), so either way A comes
// before B. Arrivals to the millisecond alone would not do: two sets that
// arrive in one millisecond, or across a step back of the server's clock,
// could otherwise each come first in the queue of a key the other holds
// (this deadlocked TestSetsMakeProgress on a loaded machine). So along a
// chain of sets each waiting for a key held by the next, the order goes
// one way, and the chain cannot close into a cycle; the set that comes
// first among those that wait is handed every key it waits for as its
// holders release them, and single-key holders never wait while they
// hold. A set whose entry lapsed (it did not renew it for
// notify.QueueEntryLife) or whose handed key expired and was taken would
// break that order: its attempt finds it out, and it withdraws (handing
// on what it holds) and starts over with a new token and a new arrival.
// An attempt resent after a lost reply finds the set's entries already
// queued and keeps their arrival. All on one server (or one Cluster
// slot).
//
// A set's attempts are made by the set as the head of its Locker's queue
// of any of its keys would make them (announcements, retry slots, the
// holder's TTL), and it queues only while it is first among this Locker's
// waiters on each key it waits for, so that it does not get ahead of a
// waiter of the same Locker that came first but is not queued yet.

// On Redis Cluster, the keys of a set may lie in several hash slots,
// served by different masters, whose clocks do not order arrivals
// against each other. Such a set is taken one slot group after the other,
// in the order of the slots (a global order, the same for every set):
// the group of its lowest slot first, as above, then, holding it, the
// next, and so on; the set holds what it took of the groups before while
// it waits in the queues of the next, renewing it. A set that waits in
// slot s holds keys of slots up to s only, so a set can wait for a key
// held by another waiting set only if that set waits in a higher slot, or
// in the same slot with an earlier arrival: along any chain of waits the
// pair (slot, arrival) moves one way, and cannot close into a cycle. Each
// group costs its own round trips: a set of keys in g slots sends at
// least g attempts, and its Release, Refresh, TTL and each renewal one
// script per group.

// A setKey is the state of one key of a set being taken: the set's
// waiter in this Locker's queue of the key (nil unless the key is in
// group g and the set waits for it), whether the set holds it (taken,
// handed over, or found its own), since when at least (the TTL ran from
// then on, as far as the set knows), and its fence (-1 when unknown);
// and whether the set's last attempt found it held by another owner.
type setKey struct {
	w     *notify.Waiter
	held  bool
	basis time.Time
	fence int64
	taken bool
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

// A setAcquisition is one ObtainAll call: the slot groups of its set, its
// place in the queues of the keys of the group it is taking, and what it
// holds of the set so far.
type setAcquisition struct {
	l      *Locker
	set    *lockSet
	groups []setGroup
	one    [1]setGroup // the groups of a set in one slot
	cfg    config
	lk     *Lock // the set's handle, with the current token

	// g is the group being taken; joined is set once the set waits in
	// this Locker's queues of its keys.
	g      int
	joined bool
	// token is the set's token, entry its queue entry (once an attempt
	// used the queues), arrival its
	// arrival in the queues of group g as its server answered it (0
	// until an attempt queued it there).
	token, entry string
	arrival      int64
	wakeCh       <-chan struct{}
	// at is the state of each key, in the set's order.
	at []setKey
	// last is the last refused attempt's outcome, and lastHeld the index
	// in the set of the key it found held.
	last     setRes
	lastHeld int
	// confirm is set when the set holds every key but must make an
	// attempt to be sure of them for long enough (or learn their
	// fences); restart when it must withdraw and start over.
	confirm, restart bool
	// done is set once the set holds every key, returned to the caller.
	done bool
}

var _ place = (*setAcquisition)(nil)

// newSetAcquisition starts a call for the locks of keys (sorted,
// distinct) with cfg.
func newSetAcquisition(l *Locker, keys []string, cfg *config) *setAcquisition {
	set := newLockSet(keys, cfg)
	s := &setAcquisition{l: l, set: set, cfg: *cfg}
	if s.groups = slotGroups(set, cfg, l.extras.sharded()); s.groups == nil {
		s.one[0] = setGroup{set: set, idx: allKeys(len(keys))}
		s.groups = s.one[:]
	}
	s.reset(setToken(len(keys)))
	return s
}

// reset starts the set over with token, holding and queued nowhere.
func (s *setAcquisition) reset(token string) {
	n := len(s.set.keys)
	s.token, s.entry = token, ""
	s.arrival, s.g, s.joined = 0, 0, false
	s.at = make([]setKey, n)
	s.confirm, s.restart = false, false
	s.lk = s.handle()
}

// handle returns a new handle of the set with its current token.
func (s *setAcquisition) handle() *Lock {
	cfg, set := &s.cfg, s.set
	lk := &Lock{key: set.keys[0], token: s.token, cfg: cfg.holdConfig, ttl: cfg.ttl, hold: HoldLock, fencing: cfg.fencing}
	lk.ref = lockRef{key: set.lockKeys[0].(string), lockKey: set.lockKeys[0], token: s.token, channel: set.channels[0],
		fenceTTLMS: cfg.fenceTTLMS}
	lk.store = s.l.extras.setHandles(set)
	return lk
}

// tickets returns the tickets of the keys of group g, and whether any
// key has waiters of this Locker.
func (s *setAcquisition) tickets() ([]notify.Ticket, bool) {
	grp := s.groups[s.g]
	tickets := make([]notify.Ticket, len(grp.idx))
	queued := false
	for j, ch := range grp.set.channels {
		tickets[j] = s.l.notify.Ticket(ch.(string))
		queued = queued || tickets[j].Queued
	}
	return tickets, queued
}

// join puts the set in this Locker's queue of each key of group g, with
// the tickets taken before its attempt sent at sent (zero: none), which
// found the group's key at as res says (-1: none).
func (s *setAcquisition) join(ctx context.Context, tickets []notify.Ticket, res acquireRes, at int, sent time.Time) {
	grp := s.groups[s.g]
	chs := make([]string, len(grp.idx))
	for j, ch := range grp.set.channels {
		chs[j] = ch.(string)
	}
	ws := s.l.notify.JoinAll(ctx, chs, tickets, res.attempt(), at, s.token, sent)
	for j, i := range grp.idx {
		s.at[i].w = ws[j]
	}
	s.wakeCh = ws[0].Wake()
	s.joined = true
}

func (s *setAcquisition) name() string          { return s.set.keys[0] }
func (s *setAcquisition) wake() <-chan struct{} { return s.wakeCh }

func (s *setAcquisition) refused(acquireRes) error {
	key := s.set.keys[s.lastHeld]
	if out := s.last.outOfService; out != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, out)
	}
	return heldElsewhere(key)
}

// send makes one attempt on group g, sent at start, using the queues as
// mode says. It reports whether the set now holds the whole group (its
// waiters there leave this Locker's queues); an error is settled as
// settle does for one key, releasing what the set holds.
func (s *setAcquisition) send(ctx context.Context, mode string, start time.Time) (bool, acquireRes, error) {
	cfg, grp := &s.cfg, s.groups[s.g]
	if mode != setUnqueued && s.entry == "" {
		s.entry = queueEntry(cfg.ttlMS.(int64), cfg.fencing, s.token)
	}
	res, err := s.l.extras.acquireSet(ctx, grp.set, setReq{token: s.lk.ref.token, ttlMS: cfg.ttlMS,
		fenceTTLMS: cfg.fenceTTLMS, mode: mode, entry: s.entry, arrival: s.arrival})
	if err != nil {
		var cleaned acquireRes
		if mayHaveLanded(err) || s.holdsAny() {
			deleteIfOwned(ctx, s.lk)
			cleaned.cleaned = true
		}
		if ctx.Err() != nil {
			return false, cleaned, notObtained(ctx, s.name())
		}
		return false, cleaned, fmt.Errorf("locksmith: obtain %q: %w", s.set.keys, err)
	}
	if !res.ok {
		s.last, s.lastHeld = res, grp.idx[res.held]
		if res.arrival != 0 {
			s.arrival = res.arrival
		}
		return false, acquireRes{holderTTL: res.holderTTL, holder: res.holder}, nil
	}
	for j, i := range grp.idx {
		if w := s.at[i].w; w != nil {
			s.l.notify.Won(w, start.Add(cfg.ttl), false)
		}
		s.at[i].w, s.at[i].held, s.at[i].basis, s.at[i].fence = nil, true, start, res.fences[j]
	}
	return true, acquireRes{ok: true, mine: res.handed}, nil
}

// advance moves on from group g, which the set now holds: to the next
// group, or, after the last, to the set's return (see finish).
func (s *setAcquisition) advance(ctx context.Context, start time.Time) (*Lock, error) {
	if s.g+1 < len(s.groups) {
		s.g, s.arrival, s.joined = s.g+1, 0, false
		return nil, nil
	}
	lk, err := s.finish(ctx, start, s.since())
	if err != nil {
		s.dropHeld() // released by finish
		return nil, err
	}
	s.done = true
	return lk, nil
}

// finish returns the set's handle, its TTL running from since at least,
// once it is sure the hold is still valid (checked from start), that ctx
// has not ended and that the Locker is not closed; otherwise it releases
// the set and returns an error.
func (s *setAcquisition) finish(ctx context.Context, start, since time.Time) (*Lock, error) {
	lk, cfg, set := s.lk, &s.cfg, s.set
	lk.deadline, lk.since = since.Add(cfg.ttl-cfg.driftFor(cfg.ttl)), since
	if cfg.fencing {
		set.fenceOf = make(map[string]int64, len(set.keys))
		for i, k := range set.keys {
			set.fenceOf[k] = s.at[i].fence
			lk.fence = max(lk.fence, s.at[i].fence)
		}
	}
	switch elapsed := time.Since(start); {
	case !time.Now().Before(lk.deadline):
		deleteIfOwned(ctx, lk)
		return nil, fmt.Errorf("%w: the reply obtaining %q took %v, longer than its validity of %v",
			ErrLockLost, set.keys, elapsed, lk.deadline.Sub(since))
	case ctx.Err() != nil:
		deleteIfOwned(ctx, lk)
		return nil, notObtained(ctx, s.name())
	case s.l.notify.IsClosed():
		deleteIfOwned(ctx, lk)
		return nil, closedErr(s.name())
	}
	return lk, nil
}

// handedOver counts the keys handed to the set since the last call, and
// returns the set when it holds them all for long enough.
func (s *setAcquisition) handedOver(ctx context.Context) (*Lock, bool, error) {
	n := s.l.notify
	heard := false
	for i := range s.at {
		w := s.at[i].w
		if w == nil {
			continue
		}
		h, since := n.TakeHandoff(w)
		if h == nil {
			continue
		}
		heard = true
		n.Won(w, since.Add(h.TTL), false)
		s.at[i].w, s.at[i].held, s.at[i].basis, s.at[i].fence = nil, true, since, h.Fence
	}
	if !heard {
		return nil, false, nil
	}
	if !s.holdsGroup() {
		// The keys it still waits for were free at its last attempt:
		// no release of them will wake it, so it tries at once.
		s.confirm = !s.waitsForTaken()
		return nil, false, nil
	}
	if s.g+1 < len(s.groups) {
		// On to the next group: the next attempt joins its queues.
		_, err := s.advance(ctx, time.Now())
		return nil, false, err
	}
	since := s.since()
	cfg := &s.cfg
	if time.Until(since.Add(cfg.ttl-cfg.driftFor(cfg.ttl))) < cfg.ttl/2 || (cfg.fencing && s.fenceUnknown()) {
		// Held since long ago, as far as the set knows, or with a fence
		// it has not heard: an attempt renews every key of the group and
		// answers their fences (and the groups before are renewed when
		// due).
		s.confirm = true
		return nil, false, nil
	}
	lk, err := s.advance(ctx, time.Now())
	return lk, lk != nil || err != nil, err
}

// waitsForTaken reports whether a key of group g that the set does not
// hold was held by another owner at its last attempt: its release (or
// expiry, which the set's polls notice) is what the set waits for.
func (s *setAcquisition) waitsForTaken() bool {
	for _, i := range s.groups[s.g].idx {
		if !s.at[i].held && s.at[i].taken {
			return true
		}
	}
	return false
}

// holdsAny reports whether the set holds any key.
func (s *setAcquisition) holdsAny() bool {
	for _, k := range s.at {
		if k.held {
			return true
		}
	}
	return false
}

// dropHeld forgets the keys the set held, once they are released.
func (s *setAcquisition) dropHeld() {
	for i := range s.at {
		s.at[i].held = false
	}
}

// since returns the earliest time the set's TTL ran from on a key.
func (s *setAcquisition) since() time.Time {
	since := s.at[0].basis
	for _, k := range s.at[1:] {
		if k.basis.Before(since) {
			since = k.basis
		}
	}
	return since
}

// fenceUnknown reports whether the fence of a key is unknown.
func (s *setAcquisition) fenceUnknown() bool {
	for _, k := range s.at {
		if k.fence == -1 {
			return true
		}
	}
	return false
}

// holdsGroup reports whether the set holds every key of group g.
func (s *setAcquisition) holdsGroup() bool {
	for _, i := range s.groups[s.g].idx {
		if !s.at[i].held {
			return false
		}
	}
	return true
}

func (s *setAcquisition) plan() (tryNow bool, tryAt time.Time, head bool) {
	if s.confirm || s.restart || !s.joined {
		return true, time.Time{}, false
	}
	head = true
	placed := s.placed()
	for i := range s.at {
		w := s.at[i].w
		if w == nil {
			if s.at[i].held {
				// Held: renewed when half its TTL has passed.
				if renew := s.at[i].basis.Add(s.cfg.ttl / 2); tryAt.IsZero() || renew.Before(tryAt) {
					tryAt = renew
				}
			}
			continue
		}
		now, at, h := s.l.notify.PlanQueuing(w, placed)
		tryNow = tryNow || now
		head = head && (h || now)
		if !at.IsZero() && (tryAt.IsZero() || at.Before(tryAt)) {
			tryAt = at
		}
	}
	return tryNow, tryAt, head && !tryNow
}

// placed reports whether the set may queue: it is first among this
// Locker's waiters, or queued already, on every key it waits for.
func (s *setAcquisition) placed() bool {
	for _, k := range s.at {
		w := k.w
		if w != nil && !s.l.notify.Placed(w) {
			return false
		}
	}
	return true
}

// attempt makes the set's attempt on group g: queued on every key of the
// group it does not hold when it is first among this Locker's waiters on
// each of them. It first starts over when it must, renews the groups
// before g that are due, and joins the queues of group g when it has not.
func (s *setAcquisition) attempt(ctx context.Context) (*Lock, acquireRes, error) {
	if s.restart {
		s.startOver(ctx)
	}
	if err := s.renewGroups(ctx); err != nil {
		return nil, acquireRes{cleaned: true}, err
	}
	if !s.joined {
		tickets, _ := s.tickets()
		s.join(ctx, tickets, acquireRes{}, -1, time.Time{})
	}
	n := s.l.notify
	mode := setLeaves
	if s.placed() {
		mode = setQueues
	}
	for _, k := range s.at {
		w := k.w
		switch {
		case w == nil:
		case mode == setQueues:
			n.Sending(w)
		default:
			n.SendingUnqueued(w)
		}
	}
	start := time.Now()
	won, res, err := s.send(ctx, mode, start)
	switch {
	case err != nil:
		return nil, res, err
	case won:
		lk, err := s.advance(ctx, start)
		if err != nil {
			return nil, acquireRes{cleaned: true}, err
		}
		return lk, res, nil
	}
	s.learn(start)
	return nil, res, nil
}

// renewGroups renews each group before g whose keys are due, starting
// the set over when one is found lost. An error ends the call, the set
// released.
func (s *setAcquisition) renewGroups(ctx context.Context) error {
	for _, grp := range s.groups[:s.g] {
		due := false
		for _, i := range grp.idx {
			due = due || !time.Now().Before(s.at[i].basis.Add(s.cfg.ttl/2))
		}
		if !due {
			continue
		}
		start := time.Now()
		ok, err := s.l.extras.setHandles(grp.set).refresh(ctx, s.lk.ref, s.cfg.ttl)
		switch {
		case err != nil:
			deleteIfOwned(ctx, s.lk)
			s.dropHeld()
			if ctx.Err() != nil {
				return notObtained(ctx, s.name())
			}
			return fmt.Errorf("locksmith: obtain %q: renew %q: %w", s.set.keys, grp.set.keys, err)
		case !ok:
			s.startOver(ctx)
			return nil
		}
		for _, i := range grp.idx {
			s.at[i].basis = start
		}
	}
	return nil
}

// learn acts on the refused attempt sent at start (s.last): the keys it
// found holding the set's token are the set's, renewed from start; a key
// the set held that it did not find, or an entry that lapsed, means the
// set lost its place, and starts over.
func (s *setAcquisition) learn(start time.Time) {
	res := &s.last
	if res.mine == nil {
		return
	}
	s.confirm = false
	s.restart = s.restart || res.lapsed
	for j, mine := range res.mine {
		i := s.groups[s.g].idx[j]
		s.at[i].taken = res.taken[j]
		switch {
		case mine && s.at[i].held:
			s.at[i].basis = start
		case mine:
			// Handed over unheard (or taken by an earlier delivery of
			// this attempt): its fence is learned by the attempt that
			// completes the group.
			if w := s.at[i].w; w != nil {
				s.l.notify.Won(w, start.Add(s.cfg.ttl), false)
			}
			s.at[i].w, s.at[i].held, s.at[i].basis, s.at[i].fence = nil, true, start, -1
		case s.at[i].held:
			s.restart = true
		}
	}
	if s.holdsGroup() {
		s.confirm = true
	}
}

// startOver withdraws the set from every queue, releasing what it holds
// to the next in line, and starts over with a new token, from the first
// group; its next attempt joins this Locker's queues again, behind the
// waiters there.
func (s *setAcquisition) startOver(ctx context.Context) {
	s.leave(ctx)
	s.reset(setToken(len(s.set.keys)))
}

func (s *setAcquisition) won(lk *Lock, _ acquireRes) {
	s.done = true
	for i := range s.at {
		w := s.at[i].w
		if w != nil {
			s.l.notify.Won(w, lk.Deadline(), false)
			s.at[i].w = nil
		}
	}
}

func (s *setAcquisition) lost(res acquireRes, sent time.Time) {
	for i := range s.at {
		w := s.at[i].w
		if w == nil {
			continue
		}
		a := noAttempt
		if i == s.lastHeld {
			a = res.attempt()
		}
		s.l.notify.Lost(w, a, sent)
	}
}

func (s *setAcquisition) failed(res acquireRes) {
	if !res.cleaned {
		return
	}
	for _, k := range s.at {
		w := k.w
		if w != nil {
			s.l.notify.Withdrawn(w)
		}
	}
	s.dropHeld()
}

// leave takes the set out of this Locker's queues and, unless it won,
// withdraws it from Redis: its entries, and the keys it holds.
func (s *setAcquisition) leave(ctx context.Context) {
	withdraw := s.holdsAny()
	for i := range s.at {
		w := s.at[i].w
		if w != nil && s.l.notify.Leave(w) {
			withdraw = true
		}
		s.at[i].w = nil
	}
	if withdraw && !s.done {
		deleteIfOwned(ctx, s.lk)
	}
}
