package locksmith

import (
	"context"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith/internal/notify"
)

// The call that takes a set of locks: acquireSet and the state of one
// ObtainAll while it takes its keys (setAcquisition); its waiting, in
// multi_wait.go.

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
