package locksmith

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting for a lock, the way this package does it:
//
// The release script announces every release on a channel of the lock's
// own (PUBLISH in the same script call as the delete or the handoff: see
// handoff.go). A Locker whose Obtain calls wait for a lock subscribes to
// that channel, on one pub/sub connection shared by all of its waiters,
// and keeps them in a FIFO queue per key. Usually the lock is handed to a
// queued waiter, and the announcement names it: its Locker returns the
// lock to it, and every other Locker learns how long the new holder holds
// it. An announcement of a plain release (nobody was queued in Redis)
// wakes only the head of each Locker's queue, which tries once; the others
// stay asleep and send nothing. So however many goroutines wait, each
// Locker sends at most one attempt per release, and a goroutine that has
// waited longest goes first. A new Obtain call on a key that already has
// waiters in this Locker joins the back of the queue without trying, so a
// goroutine that releases and asks again at once cannot barge ahead of
// those already waiting. A head that is not queued in Redis yet (it just
// became the head) tries at once, which queues it.
//
// Not every release is announced: the holder may crash and its key
// expire, someone may delete the key by hand, or another client may
// hold the same key with the plain recipe (SET NX, then a compare-and-
// delete that publishes nothing). Keyspace notifications would tell, but
// they are off by default and cannot be relied on. So the head of each
// Locker's queue also polls: it tries at the end of every delay of its
// retry strategy, and when the holder's remaining TTL, which every failed
// attempt reports, runs out first. An unannounced release is noticed
// within one delay and a round trip, at the cost of one attempt per delay
// per Locker and key, however many goroutines wait; the announcements
// only make the common case faster. While the subscription is not
// confirmed (it is being set up, or its connection dropped and go-redis
// is reconnecting) the head polls the same way, and after the
// subscription is confirmed again it tries once more, at once, to catch
// releases announced while it was down.
//
// The retry strategy keeps its meaning: each delay it returns is a slot in
// which the waiter may try, and the waiter gives up when the strategy
// does. The head tries in every slot, at its end unless an announcement
// woke it sooner; a waiter behind the head lets its slots pass without
// sending anything, since the head would have won before it.

// Timing of the notification machinery.
const (
	// notifyLinger is how long a key stays subscribed after its last
	// waiter has gone, and the connection stays open after its last key,
	// so that bursts of contention do not resubscribe each time.
	notifyLinger = 500 * time.Millisecond
	// notifyTick is how often the dispatcher looks for idle keys and
	// checks that the connection is alive.
	notifyTick = 100 * time.Millisecond
	// notifyPingAfter is how long a quiet connection goes unchecked; a
	// PING unanswered for as long again marks it dead.
	notifyPingAfter = 2 * time.Second
	// notifyErrorPause bounds the pause after a failed receive, so a
	// connection that cannot be re-established is not retried in a spin.
	notifyErrorPause = time.Second
	// rivalMemory is how long a Locker remembers that another one
	// competed for a key: see keyQueue.ours.
	rivalMemory = time.Second
)

// isSharded reports whether client is a Redis Cluster client, whose
// release announcements go through sharded pub/sub.
func isSharded(client redis.UniversalClient) bool {
	_, ok := client.(*redis.ClusterClient)
	return ok
}

// notifier multiplexes the release announcements of one Locker's keys
// onto pub/sub connections, and queues the Locker's waiters per key. With
// one server (or Sentinel) all keys share one connection. On Redis
// Cluster each key has a connection of its own to the shard that owns its
// channel, since one connection cannot subscribe to channels of several
// shards; the waiters of one key still share it.
type notifier struct {
	client  redis.UniversalClient
	sharded bool

	// active counts the keys with a queue, so that an Obtain on a Locker
	// that waits for nothing skips the lookup.
	active atomic.Int64
	// rtt estimates, in nanoseconds, how long the waiters' attempts take
	// on a quiet path: how long a Locker defers to its rivals.
	rtt atomic.Int64

	mu   sync.Mutex           // guards the fields below, every keyQueue and every subConn
	keys map[string]*keyQueue // by channel
	// shared is the one connection when not sharded; nil while no
	// dispatcher runs.
	shared *subConn
	// closed is set by close; no dispatcher starts after it. done is
	// closed with it, to cut short a dispatcher's pause.
	closed bool
	done   chan struct{}
	// ctx is the context of the dispatchers' I/O, cancelled by close so
	// that a dial in progress ends.
	ctx    context.Context
	cancel context.CancelFunc

	// isClosed mirrors closed, for the calls that check it without mu.
	isClosed atomic.Bool
	// dispatchers counts the running dispatcher goroutines: close waits
	// for them.
	dispatchers sync.WaitGroup
}

// subConn is one pub/sub connection and the keys subscribed on it. Its
// dispatcher goroutine, started with it, dials it and reads it until it
// has no keys left (or the Locker or the client is closed), and then
// closes it; the dispatcher does all of its I/O but the SUBSCRIBE of a key
// added while it is up, which the caller that adds the key sends.
type subConn struct {
	ps   *redis.PubSub        // nil until the dispatcher has dialed it
	keys map[string]*keyQueue // by channel: the keys it should be subscribed to
	// up is false while the connection is known to be down; its keys are
	// subscribed again when it comes back.
	up bool
}

// keyQueue is the state of one key's waiters in one Locker.
type keyQueue struct {
	channel string
	conn    *subConn  // the connection the channel is subscribed on
	waiters []*waiter // in arrival order; waiters[0] is the head
	// woken is the head when it has been told to try and has not yet
	// reported back; nil otherwise.
	woken *waiter
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
	// handedTo is the last handoff announced, kept for a waiter whose
	// attempt queued it and that joins after the handoff was heard.
	handedTo handoff
	// idleSince is when the last waiter left, for unsubscribing.
	idleSince time.Time

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

// waiter is one Obtain call waiting in a queue.
type waiter struct {
	q *keyQueue
	// wake asks the waiter to look at the queue again: it may have been
	// woken to try, or become the head, or been handed the lock. It has
	// room for one signal.
	wake chan struct{}
	// token is the token of every attempt of the waiter, and of its entry
	// in the handoff queue (see handoff.go).
	token string
	// queue is whether the waiter's attempts queue it for handoffs.
	queue bool

	// Guarded by the notifier's mu:

	// queued is set once an attempt that queues the waiter was sent: its
	// entry may be in the handoff queue.
	queued bool
	// since is when the waiter's first queued attempt was sent, which
	// precedes any handoff to it; renewAt is when its queue entry is due
	// for renewal.
	since, renewAt time.Time
	// handedOver is the handoff of the lock to the waiter, once heard.
	handedOver *handoff
	// missed is set when an attempt found that the lock was handed to
	// the waiter without its hearing of it: it should try.
	missed bool
	// done is set when the waiter leaves the queue with the lock.
	done bool
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func newNotifier(client redis.UniversalClient) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{client: client, sharded: isSharded(client), keys: make(map[string]*keyQueue), done: make(chan struct{}),
		ctx: ctx, cancel: cancel}
}

// ticket is what a waiter knows about a key's announcements before its
// first attempt.
type ticket struct {
	queued  bool   // other waiters of this Locker are already waiting
	existed bool   // the key had a queue (and maybe a subscription)
	events  uint64 // the queue's events by then
}

// ticket returns the state of the queue of the lock whose releases are
// announced on ch, before an attempt.
func (n *notifier) ticket(ch string) ticket {
	if n.active.Load() == 0 {
		return ticket{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.keys[ch]
	if q == nil {
		return ticket{}
	}
	return ticket{queued: len(q.waiters) > 0, existed: true, events: q.events}
}

// join adds a waiter at the back of the queue of the lock whose releases
// are announced on ch. t is the ticket taken
// before the waiter's attempt, and res what that attempt learned (a
// negative holderTTL if it made none). token is the waiter's token, queue
// whether its attempts queue it for handoffs, and sent when its attempt
// was sent (zero if it made none).
func (n *notifier) join(ctx context.Context, ch string, t ticket, res acquireRes, token string, queue bool, sent time.Time) *waiter {
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
	q := n.keys[ch]
	created := q == nil
	if created {
		q = &keyQueue{channel: ch}
		n.keys[ch] = q
		n.active.Add(1)
		subscribeOn = n.subscribeLocked(q)
	}
	if holderUntil := holderExpiry(res.holderTTL); !holderUntil.IsZero() {
		q.holderUntil = holderUntil
	}
	n.heldByLocked(q, res.holder)
	w := &waiter{q: q, wake: make(chan struct{}, 1), token: token, queue: queue}
	if queue && !sent.IsZero() {
		w.queued, w.since, w.renewAt = true, sent, sent.Add(queueEntryRenew)
		if q.handedTo.token == token {
			// Handed over before the waiter joined.
			h := q.handedTo
			w.handedOver = &h
			w.signal()
		}
	}
	q.waiters = append(q.waiters, w)
	// A release announced between the ticket and now may have found no
	// waiter to wake: make up for it. (A new subscription needs nothing:
	// its confirmation wakes the head.)
	if !created && q.subscribed && (!t.existed || t.events != q.events) {
		n.kickLocked(q)
	}
	return w
}

// subscribeLocked adds q's channel to a connection's keys, starting a
// connection and its dispatcher if needed, which subscribes it. It sends
// nothing: it returns the connection on which the caller, once it has
// released mu, must send the SUBSCRIBE, if one is up (nil otherwise). The
// confirmation, read by the dispatcher, sets q.subscribed; until then the
// key's waiters poll. After close nothing starts, and the waiters poll
// until they see that the Locker is closed.
func (n *notifier) subscribeLocked(q *keyQueue) *redis.PubSub {
	if c := n.shared; c != nil && !n.sharded {
		c.keys[q.channel] = q
		q.conn = c
		if c.up && c.ps != nil {
			return c.ps
		}
		// Being dialed: the dispatcher subscribes every key once it is.
		return nil
	}
	c := &subConn{keys: map[string]*keyQueue{q.channel: q}}
	q.conn = c
	if n.closed {
		return nil
	}
	if !n.sharded {
		n.shared = c
	}
	n.dispatchers.Add(1)
	go n.dispatch(c)
	return nil
}

// newPubSub dials a pub/sub connection subscribed to channels. On a
// cluster the first command decides which node the connection talks to,
// which must be the one that owns the channels.
func (n *notifier) newPubSub(channels ...string) *redis.PubSub {
	if n.sharded {
		return n.client.SSubscribe(n.ctx, channels...)
	}
	return n.client.Subscribe(n.ctx, channels...)
}

func (n *notifier) subscribe(ctx context.Context, ps *redis.PubSub, channels ...string) error {
	if n.sharded {
		return ps.SSubscribe(ctx, channels...)
	}
	return ps.Subscribe(ctx, channels...)
}

func (n *notifier) unsubscribe(ps *redis.PubSub, channels ...string) error {
	if n.sharded {
		return ps.SUnsubscribe(n.ctx, channels...)
	}
	return ps.Unsubscribe(n.ctx, channels...)
}

// kickLocked wakes the head of q to try, or, when a woken waiter is
// already trying, records that it should try once more.
func (n *notifier) kickLocked(q *keyQueue) {
	switch {
	case len(q.waiters) == 0:
	case q.woken != nil:
		q.pending = true
	default:
		q.woken = q.waiters[0]
		q.woken.signal()
	}
}

// plan tells waiter w what to do next: try now, or sleep until at most
// tryAt (zero: until woken or its retry slot ends) and then try. head is
// whether w is at the head of its queue, and so tries at the end of its
// retry slot too.
func (n *notifier) plan(w *waiter) (tryNow bool, tryAt time.Time, head bool) {
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
	case w.queue && !w.queued:
		// A new head: queue up for the next handoff.
		return true, time.Time{}, false
	}
	tryAt = q.holderUntil
	if w.queued && (tryAt.IsZero() || w.renewAt.Before(tryAt)) {
		tryAt = w.renewAt
	}
	return false, tryAt, true
}

// sending records that w is about to send an attempt.
func (n *notifier) sending(w *waiter) {
	if !w.queue {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !w.queued {
		w.queued, w.since = true, time.Now()
	}
}

// takeHandoff returns the handoff of the lock to w, if one was heard,
// and when w's first queued attempt was sent.
func (n *notifier) takeHandoff(w *waiter) (*handoff, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := w.handedOver
	w.handedOver = nil
	return h, w.since
}

// won reports that w got the lock, by its attempt or a handoff: it leaves
// the queue, and its lock expires at holderUntil.
func (n *notifier) won(w *waiter, holderUntil time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.triedLocked(w, true, holderUntil)
	w.done = true
	n.removeLocked(w)
}

// lost reports that w's attempt, sent at sent, found the lock taken, and
// what it learned of the holder.
func (n *notifier) lost(w *waiter, res acquireRes, sent time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.queue {
		w.renewAt = sent.Add(queueEntryRenew)
	}
	n.triedLocked(w, false, holderExpiry(res.holderTTL))
	n.heldByLocked(w.q, res.holder)
}

// heldByLocked acts on an attempt's finding that holder holds q's lock:
// if that is one of q's waiters, a handoff to it was missed (it was
// announced while the subscription was down, or before the waiter
// joined), and that waiter is told to try: its attempt will find its own
// token and return the lock.
func (n *notifier) heldByLocked(q *keyQueue, holder string) {
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
func (n *notifier) triedLocked(w *waiter, won bool, holderUntil time.Time) {
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

// leave removes w from its queue if it is still there, passing on a wake
// it had not used. It reports whether w must withdraw from the handoff
// queue: it may be queued there and did not get the lock.
func (n *notifier) leave(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(w)
	return w.queued && !w.done
}

func (n *notifier) removeLocked(w *waiter) {
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
		q.idleSince = time.Now()
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

// dispatch dials c and reads it until it has no keys left to watch, or
// the Locker or the client is closed.
func (n *notifier) dispatch(c *subConn) {
	defer n.dispatchers.Done()
	ctx := n.ctx
	ps := n.connect(c)
	if ps == nil {
		return
	}
	lastHeard := time.Now()
	var pingSent time.Time // zero when no PING is outstanding
	errPause := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, notifyTick)
		now := time.Now()
		switch {
		case err == nil:
			lastHeard, pingSent, errPause = now, time.Time{}, 10*time.Millisecond
			switch n.handle(c, msg) {
			case replaceConn:
				if ps = n.replace(c, ps); ps == nil {
					return
				}
			case resubscribe:
				n.resubscribe(c, ps)
			}
		case isTimeout(err):
			switch {
			case !pingSent.IsZero() && now.Sub(pingSent) > notifyPingAfter:
				// The connection is silently dead. Start over on a new
				// one, subscribed to every key.
				if ps = n.replace(c, ps); ps == nil {
					return
				}
				lastHeard, pingSent = now, time.Time{}
			case pingSent.IsZero() && now.Sub(lastHeard) > notifyPingAfter:
				if ps.Ping(ctx) == nil {
					pingSent = now
				}
			}
		case errors.Is(err, redis.ErrClosed):
			// Closed by close, or the client was.
			n.down(c)
			n.forget(c)
			return
		default:
			// The connection failed, or the server refused a
			// subscription (on a cluster, MOVED: the slot has moved).
			// The waiters poll until a new connection is subscribed.
			n.down(c)
			pause := time.NewTimer(errPause)
			select {
			case <-pause.C:
			case <-n.done:
				pause.Stop()
			}
			errPause = min(errPause*2, notifyErrorPause)
			if ps = n.replace(c, ps); ps == nil {
				return
			}
		}
		if n.reap(c, ps, now) {
			return
		}
	}
}

// observe folds the duration of one attempt into the round-trip
// estimate. The estimate follows the fastest attempts (it drops to any
// faster one, and rises only slowly) because slow ones measure a busy
// process or server, not the network, and a deferral that grows with them
// would delay every handoff.
func (n *notifier) observe(d time.Duration) {
	old := n.rtt.Load()
	if old == 0 || int64(d) < old {
		n.rtt.Store(int64(d))
		return
	}
	n.rtt.Store(old + (int64(d)-old)/64)
}

// roundTrip returns how long a Locker defers to its rivals after its own
// release: about one round trip, within bounds.
func (n *notifier) roundTrip() time.Duration {
	return min(max(time.Duration(n.rtt.Load()), 50*time.Microsecond), 5*time.Millisecond)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// What the dispatcher must do after an item it received.
type followUp int

const (
	carryOn followUp = iota
	// replaceConn: the server dropped a sharded subscription because the
	// channel's slot moved to another shard.
	replaceConn
	// resubscribe: a key that is still wanted was unsubscribed, by an
	// UNSUBSCRIBE for a key that was idle and was joined again meanwhile.
	resubscribe
)

// handle acts on one item received on c, and says what must follow.
func (n *notifier) handle(c *subConn, msg any) followUp {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.up = true
	switch m := msg.(type) {
	case *redis.Message:
		q := c.keys[m.Channel]
		if q == nil {
			return carryOn
		}
		if h, ok := parseHandoff(m.Payload); ok {
			n.handedLocked(q, h)
		} else {
			q.events++
			if q.ours && q.woken == nil && time.Since(q.rivalSeen) < rivalMemory {
				q.notBefore = time.Now().Add(n.roundTrip())
			}
			n.kickLocked(q)
		}
	case *redis.Subscription:
		q := c.keys[m.Channel]
		if q == nil {
			return carryOn
		}
		switch m.Kind {
		case "subscribe", "ssubscribe":
			if !q.subscribed {
				q.subscribed = true
				q.events++
				// Releases before this moment were not announced to
				// us: let the head check.
				n.kickLocked(q)
			}
		case "unsubscribe":
			// Sent by reap for a key that was idle then; it is wanted
			// again (a SUBSCRIBE may have crossed it): poll until the
			// dispatcher has subscribed it again.
			q.subscribed = false
			if len(q.waiters) > 0 {
				q.waiters[0].signal()
			}
			return resubscribe
		case "sunsubscribe":
			// Not asked for, or asked for as above: the slot may have
			// moved. Poll until subscribed again on the shard that owns
			// it now.
			q.subscribed = false
			if len(q.waiters) > 0 {
				q.waiters[0].signal()
			}
			return replaceConn
		}
	}
	return carryOn
}

// resubscribe subscribes ps to the keys of c that are not subscribed.
func (n *notifier) resubscribe(c *subConn, ps *redis.PubSub) {
	n.mu.Lock()
	var channels []string
	for ch, q := range c.keys {
		if !q.subscribed {
			channels = append(channels, ch)
		}
	}
	n.mu.Unlock()
	if len(channels) > 0 {
		_ = n.subscribe(n.ctx, ps, channels...)
	}
}

// handedLocked acts on the announcement that a release handed q's lock
// over: to one of q's waiters, which takes it, or to someone else, who
// holds it for h.ttl.
func (n *notifier) handedLocked(q *keyQueue, h handoff) {
	q.handedTo = h
	q.holderUntil = time.Now().Add(h.ttl + time.Millisecond)
	for _, w := range q.waiters {
		if w.token == h.token {
			q.ours = true
			w.handedOver = &h
			w.signal()
			return
		}
	}
	q.ours = false
}

// down marks every key of c unsubscribed after the connection failed, and
// tells the heads of their queues to poll.
func (n *notifier) down(c *subConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.up = false
	for _, q := range c.keys {
		q.subscribed = false
		if len(q.waiters) > 0 {
			q.waiters[0].signal()
		}
	}
}

// replace closes c's connection old and dials a new one subscribed to
// every key of c. It returns the new connection, or nil when the
// notifier was closed meanwhile.
func (n *notifier) replace(c *subConn, old *redis.PubSub) *redis.PubSub {
	n.down(c)
	_ = old.Close()
	if cc, ok := n.client.(*redis.ClusterClient); ok {
		// The slot may have moved: learn where it lives now. The reload
		// runs in the background; until it lands, the new subscription
		// may be refused again and replaced again.
		cc.ReloadState(n.ctx)
	}
	return n.connect(c)
}

// connect dials a connection for c, subscribed to every key of c, with
// mu released; keys added meanwhile are subscribed once it is up. It
// returns the connection, or nil, having closed it, when the notifier
// was closed meanwhile.
func (n *notifier) connect(c *subConn) *redis.PubSub {
	n.mu.Lock()
	channels := make([]string, 0, len(c.keys))
	for ch := range c.keys {
		channels = append(channels, ch)
	}
	n.mu.Unlock()
	ps := n.newPubSub(channels...)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = ps.Close()
		n.forget(c)
		return nil
	}
	c.ps, c.up = ps, true
	var added []string
	for ch := range c.keys {
		if !slices.Contains(channels, ch) {
			added = append(added, ch)
		}
	}
	n.mu.Unlock()
	if len(added) > 0 {
		_ = n.subscribe(n.ctx, ps, added...)
	}
	return ps
}

// forget drops c after its connection was closed; its keys' waiters poll.
func (n *notifier) forget(c *subConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.shared == c {
		n.shared = nil
	}
	for ch, q := range c.keys {
		if len(q.waiters) == 0 {
			delete(c.keys, ch)
			delete(n.keys, ch)
			n.active.Add(-1)
		}
	}
}

// close stops every dispatcher and waits for them: it closes their
// connections and wakes every waiter, which then sees that the Locker is
// closed. It is safe to call more than once.
func (n *notifier) close() {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		n.isClosed.Store(true)
		close(n.done)
		n.cancel()
	}
	var conns []*redis.PubSub
	seen := make(map[*subConn]bool)
	for _, q := range n.keys {
		for _, w := range q.waiters {
			w.signal()
		}
		if c := q.conn; c != nil && !seen[c] {
			seen[c] = true
			if c.ps != nil {
				conns = append(conns, c.ps)
			}
		}
	}
	n.mu.Unlock()
	for _, ps := range conns {
		_ = ps.Close()
	}
	n.dispatchers.Wait()
}

// reap unsubscribes c's keys idle for longer than notifyLinger and, when
// none is left, closes the connection. It reports whether the dispatcher
// should return.
func (n *notifier) reap(c *subConn, ps *redis.PubSub, now time.Time) bool {
	n.mu.Lock()
	var idle []string
	for ch, q := range c.keys {
		if len(q.waiters) == 0 && now.Sub(q.idleSince) > notifyLinger {
			idle = append(idle, ch)
			delete(c.keys, ch)
			delete(n.keys, ch)
			n.active.Add(-1)
		}
	}
	last := len(c.keys) == 0
	if last && n.shared == c {
		n.shared = nil
	}
	n.mu.Unlock()
	if last {
		_ = ps.Close()
		return true
	}
	if len(idle) > 0 {
		_ = n.unsubscribe(ps, idle...)
	}
	return false
}

// closedErr is the error of a waiter of key whose Locker was closed.
func closedErr(key string) error {
	return fmt.Errorf("%w: obtaining %q", ErrClosed, key)
}
