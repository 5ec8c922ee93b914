package locksmith

import (
	"context"
	"fmt"
	"time"
)

// How a set waits for its keys: the place interface of acquire.go, as a
// setAcquisition (multi_acquire.go) plays it.

func (s *setAcquisition) name() string          { return s.set.keys[0] }
func (s *setAcquisition) wake() <-chan struct{} { return s.wakeCh }

func (s *setAcquisition) refused(acquireRes) error {
	key := s.set.keys[s.lastHeld]
	if out := s.last.outOfService; out != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, out)
	}
	return heldElsewhere(key)
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
