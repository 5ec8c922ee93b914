package notify

import (
	"time"
)

// A waiter's turns: when it tries (Plan), and what each of its attempts
// or handoffs changes in its queue (Sending, TakeHandoff, Won, Lost,
// Withdrawn), including a handoff it missed (heldByLocked, PeersQueued).

// Plan tells waiter w what to do next: try now, or sleep until at most
// tryAt (zero: until woken or its retry slot ends) and then try. head is
// whether w is at the head of its queue, and so tries at the end of its
// retry slot too.
func (n *Notifier) Plan(w *Waiter) (tryNow bool, tryAt time.Time, head bool) {
	return n.PlanQueuing(w, true)
}

// PlanQueuing is Plan for a waiter whose next attempt queues it only if
// mayQueue is set (a set's, which queues on every key or none): when it
// may not, a head that is not queued yet sleeps as a queued head does,
// rather than try at once to queue up.
func (n *Notifier) PlanQueuing(w *Waiter, mayQueue bool) (tryNow bool, tryAt time.Time, head bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := w.q
	switch {
	case q.woken == w && time.Now().Before(q.notBefore):
		return false, q.notBefore, true
	case q.woken == w:
		return true, time.Time{}, false
	case w.missed:
		w.missed = false
		return true, time.Time{}, false
	case q.waiters[0] != w:
		return false, time.Time{}, false
	case w.queue && !w.queued && mayQueue:
		// A new head: queue up for the next handoff.
		return true, time.Time{}, false
	}
	tryAt = q.holderUntil
	if w.queued && (tryAt.IsZero() || w.renewAt.Before(tryAt)) {
		tryAt = w.renewAt
	}
	return false, tryAt, true
}

// Sending records that w is about to send an attempt.
func (n *Notifier) Sending(w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.trying = true
	if w.queue && !w.queued {
		w.queued, w.since = true, time.Now()
	}
}

// SendingUnqueued records that w is about to send an attempt that does
// not queue it for handoffs (a set's attempt while another of its keys
// has waiters of this Locker ahead of it).
func (n *Notifier) SendingUnqueued(w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.trying = true
}

// Placed reports whether w may be queued for handoffs: it is queued
// already, or it is the head of its queue, so that no waiter of this
// Locker that waits longer is left unqueued behind it.
func (n *Notifier) Placed(w *Waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return w.queued || (len(w.q.waiters) > 0 && w.q.waiters[0] == w)
}

// TakeHandoff returns the handoff of the lock to w, if one was heard
// since the last call (nil otherwise), and when w's first queued attempt
// was sent.
func (n *Notifier) TakeHandoff(w *Waiter) (*Handoff, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := w.handedOver
	w.handedOver = nil
	return h, w.since
}

// Won reports that w got the lock, by its attempt or a handoff: it leaves
// the queue, and its lock expires at holderUntil. more is set when the
// attempt found more free (a permit, room for readers): the next waiter
// of a shared hold then tries at once.
func (n *Notifier) Won(w *Waiter, holderUntil time.Time, more bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.triedLocked(w, true, holderUntil)
	w.done = true
	n.removeLocked(w)
	if w.shares && more {
		n.kickLocked(w.q)
	}
}

// Lost reports that w's attempt, sent at sent, found the lock taken, and
// what it learned of the holders.
func (n *Notifier) Lost(w *Waiter, a Attempt, sent time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.queue {
		w.renewAt = sent.Add(QueueEntryRenew)
	}
	n.triedLocked(w, false, holderExpiry(a.HolderTTL))
	n.heldByLocked(w.q, a.Holder)
	for _, token := range a.PeersHolding {
		n.heldByLocked(w.q, token)
	}
}

// PeersQueued returns the tokens of the waiters queued with w that have
// (or had) an entry in the handoff queue, other than w and those that
// heard of a handoff to them or withdrew. A peer is named even after its
// entry must have lapsed: a permit handed to it just before the lapse
// lives for its own TTL (the SPIN model of the semaphore found it idle
// for that long when such peers were left out). Only the head of a Locker's queue
// tries, but every waiter whose first attempt raced with another's of the
// same Locker left an entry of its own, which a release may pop and hand
// a permit to, unheard (see heldByLocked): w's attempt asks whether one
// of them holds a permit. A lock's attempt needs none of this, since it
// learns its one holder's token.
func (n *Notifier) PeersQueued(w *Waiter) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var tokens []string
	for _, o := range w.q.waiters {
		if o != w && o.queued && !o.done && o.handedOver == nil {
			tokens = append(tokens, o.token)
		}
	}
	return tokens
}

// heldByLocked acts on an attempt's finding that holder holds q's lock:
// if that is one of q's waiters, a handoff to it was missed (it was
// announced while the subscription was down, or before the waiter
// joined), and that waiter is told to try: its attempt will find its own
// token and return the lock.
func (n *Notifier) heldByLocked(q *keyQueue, holder string) {
	if holder == "" {
		return
	}
	for _, w := range q.waiters {
		if w.token == holder {
			w.missed = true
			w.signal()
			return
		}
	}
}

// triedLocked records the outcome of w's attempt or handoff in its
// queue's state: the holder's expiry, and whether the lock is this
// Locker's now.
func (n *Notifier) triedLocked(w *Waiter, won bool, holderUntil time.Time) {
	w.trying = false
	q := w.q
	q.holderUntil = holderUntil
	q.ours = won
	if q.woken == w {
		q.woken = nil
		if !won {
			// Woken by a release, it lost the race: to another Locker,
			// since this one lets only its head try.
			q.rivalSeen = time.Now()
		}
		if won {
			// Announcements seen meanwhile were of releases before this
			// acquire: nothing is free now.
			q.pending = false
		} else if q.pending {
			q.pending = false
			n.kickLocked(q)
		}
	}
}

// Withdrawn records that w's entry in the handoff queue was withdrawn,
// and its token deleted from the lock, by the cleanup after a failed
// attempt.
func (n *Notifier) Withdrawn(w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.queued = false
}
