package notify

import (
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What an item heard on a pub/sub connection does to the waiters' queues.

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
func (n *Notifier) handle(c *subConn, msg any) followUp {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.up = true
	switch m := msg.(type) {
	case *redis.Message:
		q := c.keys[m.Channel]
		if q == nil {
			return carryOn
		}
		q.tellWatchers()
		if strings.HasPrefix(m.Payload, NewsMark) {
			// News for watchers only (an election's new leader or
			// value): nothing was released.
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
		q.tellWatchers()
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
func (n *Notifier) resubscribe(c *subConn, ps *redis.PubSub) {
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

// handoffsKept is how many of the last handoffs of a key a Locker keeps
// for its waiters that join after theirs was heard (see Join): enough for
// the releases of a busy semaphore's permits during one round trip. A
// handoff it no longer keeps is found by an attempt (see PeersQueued).
const handoffsKept = 8

// handedLocked acts on the announcement that a release handed q's lock
// over: to one of q's waiters, which takes it, or to someone else, who
// holds it for h.TTL.
func (n *Notifier) handedLocked(q *keyQueue, h Handoff) {
	if len(q.handedTo) == handoffsKept {
		q.handedTo = append(q.handedTo[:0], q.handedTo[1:]...)
	}
	q.handedTo = append(q.handedTo, h)
	q.holderUntil = time.Now().Add(h.TTL + time.Millisecond)
	for _, w := range q.waiters {
		if w.token == h.Token {
			q.ours = true
			w.handedOver = &h
			w.signal()
			return
		}
	}
	q.ours = false
}
