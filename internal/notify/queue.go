package notify

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The queue of a Locker's waiters for one key: who waits, in which
// order, and how a waiter joins and leaves it (turns.go says who tries
// when; the root package's acquire.go tells the whole story).

// keyQueue is the state of one key's waiters in one Locker.
type keyQueue struct {
	channel string
	conn    *subConn  // the connection the channel is subscribed on
	waiters []*Waiter // in arrival order; waiters[0] is the head
	// woken is the head when it has been told to try and has not yet
	// reported back; nil otherwise.
	woken *Waiter
	// pending records a release announced while woken was trying: if
	// that attempt fails, the head tries again.
	pending bool
	// subscribed is true once the server confirmed the subscription on
	// the current connection.
	subscribed bool
	// events counts the announcements and subscription confirmations
	// received, so that a waiter can tell whether one arrived between its
	// attempt and its joining.
	events uint64
	// holderUntil is when the holder's TTL runs out, as last reported by
	// a failed attempt or a handoff (zero: unknown or never).
	holderUntil time.Time
	// handedTo holds the last handoffs announced (a semaphore's releases
	// hand over several permits while a waiter's attempt is on its way
	// back), newest last, for a waiter whose attempt queued it and that
	// joins after its handoff was heard.
	handedTo []Handoff
	// idleSince is when the last waiter or watcher left, for
	// unsubscribing.
	idleSince time.Time
	// watchers hear of everything announced on the channel (see
	// watch.go); the key stays subscribed while it has any.
	watchers []*Watcher

	// Fairness between Lockers. Redis sends an announcement to its
	// subscribers one after the other, always in the same order, so
	// the Locker that subscribed first would always try first and win.
	// Instead, a Locker whose own waiter held the lock (ours) lets the
	// others go first after its release, for about one round trip
	// (notBefore), if another Locker has won the lock recently
	// (rivalSeen). With no rival the head tries at once.
	ours      bool
	rivalSeen time.Time
	notBefore time.Time // the woken head waits until then
}

// A Waiter is one Obtain call (or Acquire, ObtainRead, ...) waiting in a
// key's queue, from Join until Leave.
type Waiter struct {
	q *keyQueue
	// wake asks the waiter to look at the queue again: it may have been
	// woken to try, or become the head, or been handed the lock. It has
	// room for one signal.
	wake chan struct{}
	// token is the token of every attempt of the waiter, and of its entry
	// in the handoff queue (see the root package's handoff.go).
	token string
	// queue is whether the waiter's attempts queue it for handoffs.
	queue bool
	// shares is whether what it waits for may be held by several at
	// once (a permit, a read hold): when it wins, the next waiter tries
	// at once, since more may be free. Set by Join.
	shares bool

	// Guarded by the Notifier's mu:

	// queued is set once an attempt that queues the waiter was sent: its
	// entry may be in the handoff queue.
	queued bool
	// since is when the waiter's first queued attempt was sent, which
	// precedes any handoff to it; renewAt is when its queue entry is due
	// for renewal.
	since, renewAt time.Time
	// handedOver is the handoff of the lock to the waiter, once heard.
	handedOver *Handoff
	// missed is set when an attempt found that the lock was handed to
	// the waiter without its hearing of it: it should try.
	missed bool
	// done is set when the waiter leaves the queue with the lock.
	done bool
	// trying is set from Sending until the attempt's outcome is
	// reported (triedLocked): an announcement heard meanwhile may come
	// after the attempt ran in Redis, which then says nothing of it.
	trying bool
}

func (w *Waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wake returns the channel on which w is asked to look at its queue again
// (through Plan and TakeHandoff): it may have been woken to try, or
// become the head, or been handed the lock, or the Notifier was closed.
// It holds one signal at most, and is never closed.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Token returns w's token: the token of every attempt it makes, and of
// its entry in the handoff queue.
func (w *Waiter) Token() string { return w.token }

// Queues reports whether w's attempts queue it for handoffs.
func (w *Waiter) Queues() bool { return w.queue }

// A Ticket is what a waiter knows about a key's announcements before its
// first attempt.
type Ticket struct {
	Queued  bool   // other waiters of this Locker are already waiting
	Existed bool   // the key had a queue (and maybe a subscription)
	events  uint64 // the queue's events by then
}

// Ticket returns the state of the queue of the lock whose releases are
// announced on ch, before an attempt. It takes no lock when no key has a
// queue.
func (n *Notifier) Ticket(ch string) Ticket {
	if n.active.Load() == 0 {
		return Ticket{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.keys[ch]
	if q == nil {
		return Ticket{}
	}
	return Ticket{Queued: len(q.waiters) > 0, Existed: true, events: q.events}
}

// An Attempt is what a waiter's refused attempt learned of those who hold
// what it waits for.
type Attempt struct {
	// HolderTTL is the holder's remaining TTL: negative when unknown, or
	// when no attempt was made.
	HolderTTL time.Duration
	// Holder is the holder's token, when the attempt learned it (a
	// queued attempt for a lock).
	Holder string
	// PeersHolding are the tokens, among the peers a refused attempt for
	// a permit named (see PeersQueued), that hold one.
	PeersHolding []string
}

// Join adds a waiter at the back of the queue of the lock whose releases
// are announced on ch, subscribing the channel if it is not: on a
// connection that is up, it sends the SUBSCRIBE itself, bounded by ctx.
// t is the ticket taken before the waiter's attempt, and a what that
// attempt learned (a negative HolderTTL if it made none). token is the
// waiter's token, queue whether its attempts queue it for handoffs,
// shares whether what it waits for may be held by several at once (a
// permit, a read hold), and sent when its attempt was sent (zero if it
// made none). Leave must end the wait.
func (n *Notifier) Join(ctx context.Context, ch string, t Ticket, a Attempt, token string, queue, shares bool, sent time.Time) *Waiter {
	node := n.nodeFor(ctx, ch)
	var subscribeOn *redis.PubSub
	n.mu.Lock()
	defer func() {
		n.mu.Unlock()
		if subscribeOn != nil {
			// On a connection that is up, outside mu: one write, bounded
			// by ctx. A failure breaks the connection, which its
			// dispatcher then replaces, subscribing every key.
			_ = n.subscribe(ctx, subscribeOn, ch)
		}
	}()
	// (If another caller's key was reaped since the ticket, node is "":
	// the key gets the connection of unknown shards, and moves to its own
	// shard's when that refuses it: see rehome.)
	q, created, subscribeOn := n.keyLocked(ch, node)
	w := n.joinLocked(q, a, make(chan struct{}, 1), token, queue, shares, sent)
	// A new subscription needs nothing: its confirmation wakes the head.
	if !created && q.subscribed && (!t.Existed || t.events != q.events) {
		n.kickLocked(q)
	}
	return w
}

// JoinAll adds a set's waiter at the back of the queue of each key whose
// releases are announced on one of chs, in one step, so that the sets
// that join these queues are in the same order in each, as Join adds one
// waiter: ts are the tickets taken before the set's attempt, in the
// order of chs, and a what that attempt learned of the key chs[at] (at
// is -1 if it made none). The waiters share token and one
// Wake channel, and are queued for handoffs; sent is when the set's
// attempt that queued it was sent (zero if none did). Leave must end each
// wait.
func (n *Notifier) JoinAll(ctx context.Context, chs []string, ts []Ticket, a Attempt, at int, token string, sent time.Time) []*Waiter {
	nodes := make([]string, len(chs))
	for i, ch := range chs {
		nodes[i] = n.nodeFor(ctx, ch)
	}
	var subscribeOn []*redis.PubSub
	var subscribeCh []string
	n.mu.Lock()
	defer func() {
		n.mu.Unlock()
		for i, ps := range subscribeOn {
			_ = n.subscribe(ctx, ps, subscribeCh[i])
		}
	}()
	wake := make(chan struct{}, 1)
	ws := make([]*Waiter, len(chs))
	for i, ch := range chs {
		q, created, ps := n.keyLocked(ch, nodes[i])
		if ps != nil {
			subscribeOn, subscribeCh = append(subscribeOn, ps), append(subscribeCh, ch)
		}
		learned := Attempt{HolderTTL: -1}
		if i == at {
			learned = a
		}
		ws[i] = n.joinLocked(q, learned, wake, token, true, false, sent)
		if !created && q.subscribed && (!ts[i].Existed || ts[i].events != q.events) {
			n.kickLocked(q)
		}
	}
	return ws
}

// joinLocked adds a waiter to q as Join describes, with the wake channel
// wake.
func (n *Notifier) joinLocked(q *keyQueue, a Attempt, wake chan struct{}, token string, queue, shares bool, sent time.Time) *Waiter {
	if holderUntil := holderExpiry(a.HolderTTL); !holderUntil.IsZero() {
		q.holderUntil = holderUntil
	}
	n.heldByLocked(q, a.Holder)
	w := &Waiter{q: q, wake: wake, token: token, queue: queue, shares: shares}
	if queue && !sent.IsZero() {
		w.queued, w.since, w.renewAt = true, sent, sent.Add(QueueEntryRenew)
		for i := range q.handedTo {
			if h := q.handedTo[i]; h.Token == token {
				// Handed over before the waiter joined.
				w.handedOver = &h
				w.signal()
			}
		}
	}
	n.enqueueLocked(w)
	return w
}

// nodeFor returns the node whose connection a key announced on ch that
// has no queue yet would be subscribed on: on Redis Cluster its shard's,
// found before taking mu, since the cluster client may have to ask; ""
// otherwise.
func (n *Notifier) nodeFor(ctx context.Context, ch string) string {
	if n.sharded() && n.Ticket(ch) == (Ticket{}) {
		return n.nodeOf(ctx, ch)
	}
	return ""
}

// keyLocked returns the queue of the key whose releases are announced on
// ch, creating it, subscribed on the connection of node, if it has none;
// created says whether it did. When it returns a connection, the caller
// must send the SUBSCRIBE on it once it has released mu (see
// subscribeLocked).
func (n *Notifier) keyLocked(ch, node string) (q *keyQueue, created bool, subscribeOn *redis.PubSub) {
	if q = n.keys[ch]; q != nil {
		return q, false, nil
	}
	q = &keyQueue{channel: ch}
	n.keys[ch] = q
	n.active.Add(1)
	return q, true, n.subscribeLocked(q, node)
}

// idle reports whether nobody waits for or watches q's key.
func (q *keyQueue) idle() bool {
	return len(q.waiters) == 0 && len(q.watchers) == 0
}

// kickLocked wakes the head of q to try, or, when a woken waiter is
// already trying, records that it should try once more.
func (n *Notifier) kickLocked(q *keyQueue) {
	switch {
	case len(q.waiters) == 0:
	case q.woken != nil:
		q.pending = true
	default:
		q.woken = q.waiters[0]
		if q.woken.trying {
			// Its attempt on the way may have run before what was
			// announced: if it fails, the head tries once more.
			q.pending = true
		}
		q.woken.signal()
	}
}

// enqueueLocked adds w, which is joining, to its queue: at the back, or,
// when its attempt left a mark in Redis that stops others (w.queued: a
// lock's handoff entry, a waiting writer's intent), ahead of the waiters
// whose attempts left none (readers, of a read-write lock). Those cannot
// get in past w's mark, and only the head tries: behind them, w would
// never renew its mark, and every one of them would wait for it to
// lapse. A lock's waiters all leave entries, so they stay in arrival
// order. A head it replaces is told to look at the queue again.
func (n *Notifier) enqueueLocked(w *Waiter) {
	q := w.q
	at := len(q.waiters)
	if w.queued {
		for i, o := range q.waiters {
			if !o.queue {
				at = i
				break
			}
		}
	}
	q.waiters = slices.Insert(q.waiters, at, w)
	if at == 0 && len(q.waiters) > 1 {
		q.waiters[1].signal()
	}
}

// Leave removes w from its queue if it is still there, passing on a wake
// it had not used. It reports whether w must withdraw from the handoff
// queue: it may be queued there and did not get the lock.
func (n *Notifier) Leave(w *Waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(w)
	return w.queued && !w.done
}

func (n *Notifier) removeLocked(w *Waiter) {
	q := w.q
	i := 0
	for i < len(q.waiters) && q.waiters[i] != w {
		i++
	}
	if i == len(q.waiters) {
		return
	}
	copy(q.waiters[i:], q.waiters[i+1:])
	q.waiters[len(q.waiters)-1] = nil
	q.waiters = q.waiters[:len(q.waiters)-1]
	if len(q.waiters) == 0 {
		q.waiters = nil
		q.woken, q.pending = nil, false
		if q.idle() {
			q.idleSince = time.Now()
		}
		return
	}
	if q.woken == w {
		q.woken = nil
		n.kickLocked(q)
	} else if i == 0 {
		// A new head: it sleeps on other terms.
		q.waiters[0].signal()
	}
}
