package notify

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The subscriber: the pub/sub connections on which a Notifier hears
// release announcements, and the goroutines that read them (see
// announce.go for what the announcements do).

// subConn is one pub/sub connection and the keys subscribed on it. Its
// dispatcher goroutine, started with it, dials it and reads it until it
// has no keys left (or the Notifier or the client is closed), and then
// closes it; the dispatcher does all of its I/O but the SUBSCRIBE of a key
// added while it is up, which the caller that adds the key sends.
type subConn struct {
	node string               // its key in Notifier.conns
	ps   *redis.PubSub        // nil until the dispatcher has dialed it
	keys map[string]*keyQueue // by channel: the keys it should be subscribed to
	// up is false while the connection is known to be down; its keys are
	// subscribed again when it comes back.
	up bool
}

// subscribeLocked adds q's channel to a connection's keys, starting a
// connection and its dispatcher if needed, which subscribes it. It sends
// nothing: it returns the connection on which the caller, once it has
// released mu, must send the SUBSCRIBE, if one is up (nil otherwise). The
// confirmation, read by the dispatcher, sets q.subscribed; until then the
// key's waiters poll. After Close nothing starts, and the waiters poll
// until they see that the Notifier is closed.
func (n *Notifier) subscribeLocked(q *keyQueue, node string) *redis.PubSub {
	if c := n.conns[node]; c != nil {
		c.keys[q.channel] = q
		q.conn = c
		if c.up && c.ps != nil {
			return c.ps
		}
		// Being dialed: the dispatcher subscribes every key once it is.
		return nil
	}
	c := &subConn{node: node, keys: map[string]*keyQueue{q.channel: q}}
	q.conn = c
	if n.closed.Load() {
		return nil
	}
	n.conns[node] = c
	n.dispatchers.Add(1)
	go n.dispatch(c)
	return nil
}

// newPubSub dials a pub/sub connection subscribed to channels. On a
// cluster the first command decides which node the connection talks to,
// which must be the one that owns the channels.
func (n *Notifier) newPubSub(channels ...string) *redis.PubSub {
	if n.sharded() {
		ps := n.client.SSubscribe(n.ctx, channels[0])
		_ = n.subscribe(n.ctx, ps, channels[1:]...)
		return ps
	}
	return n.client.Subscribe(n.ctx, channels...)
}

// subscribe subscribes ps to channels. On Redis Cluster each channel takes
// a command of its own: one SSUBSCRIBE may name channels of one slot
// only, and a shard's connection carries channels of many.
func (n *Notifier) subscribe(ctx context.Context, ps *redis.PubSub, channels ...string) error {
	if !n.sharded() {
		return ps.Subscribe(ctx, channels...)
	}
	var errs []error
	for _, ch := range channels {
		errs = append(errs, ps.SSubscribe(ctx, ch))
	}
	return errors.Join(errs...)
}

// unsubscribe is subscribe's converse.
func (n *Notifier) unsubscribe(ps *redis.PubSub, channels ...string) error {
	if !n.sharded() {
		return ps.Unsubscribe(n.ctx, channels...)
	}
	var errs []error
	for _, ch := range channels {
		errs = append(errs, ps.SUnsubscribe(n.ctx, ch))
	}
	return errors.Join(errs...)
}

// dispatch dials c and reads it until it has no keys left to watch, or
// the Notifier or the client is closed.
func (n *Notifier) dispatch(c *subConn) {
	defer n.dispatchers.Done()
	ctx := n.ctx
	ev := connEvents{n: n, node: c.node}
	defer ev.report(ConnClosed, nil)
	ps := n.connect(c)
	if ps == nil {
		return
	}
	ev.dialed()
	lastHeard := time.Now()
	var pingSent time.Time // zero when no PING is outstanding
	errPause := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, notifyTick)
		now := time.Now()
		switch {
		case err == nil:
			lastHeard, pingSent, errPause = now, time.Time{}, 10*time.Millisecond
			ev.heard()
			switch n.handle(c, msg) {
			case replaceConn:
				if ps = n.replace(c, ps); ps == nil {
					return
				}
				ev.replaced(errSlotMoved)
			case resubscribe:
				n.resubscribe(c, ps)
			}
		case isTimeout(err):
			switch {
			case !pingSent.IsZero() && now.Sub(pingSent) > notifyPingAfter:
				// The connection is silently dead. Start over on a new
				// one, subscribed to every key.
				ev.failed(errNoPong)
				if ps = n.replace(c, ps); ps == nil {
					return
				}
				ev.replaced(errNoPong)
				lastHeard, pingSent = now, time.Time{}
			case pingSent.IsZero() && now.Sub(lastHeard) > notifyPingAfter:
				if ps.Ping(ctx) == nil {
					pingSent = now
				}
			}
		case errors.Is(err, redis.ErrClosed):
			// Closed by Close, or the client was.
			n.down(c)
			n.forget(c)
			return
		default:
			// The connection failed, or the server refused a
			// subscription (on a cluster, MOVED: the slot has moved).
			// The waiters poll until a new connection is subscribed.
			n.down(c)
			ev.failed(err)
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
			ev.replaced(err)
		}
		if n.reap(c, ps, now) {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// down marks every key of c unsubscribed after the connection failed, and
// tells the heads of their queues to poll.
func (n *Notifier) down(c *subConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.up = false
	for _, q := range c.keys {
		q.subscribed = false
		if len(q.waiters) > 0 {
			q.waiters[0].signal()
		}
		q.tellWatchers()
	}
}

// replace closes c's connection old and dials a new one subscribed to
// every key of c. It returns the new connection, or nil when the
// Notifier was closed meanwhile.
func (n *Notifier) replace(c *subConn, old *redis.PubSub) *redis.PubSub {
	n.down(c)
	_ = old.Close()
	// On Redis Cluster a slot may have moved: learn where it lives now,
	// and move the keys whose slot another master owns to its
	// connection. The reload runs in the background; until it lands, the
	// new subscription may be refused again and replaced again.
	if n.reload(n.ctx) {
		n.rehome(c)
	}
	return n.connect(c)
}

// connect dials a connection for c, subscribed to every key of c, with
// mu released; keys added meanwhile are subscribed once it is up. It
// returns the connection, or nil, having closed it, when the Notifier
// was closed meanwhile.
func (n *Notifier) connect(c *subConn) *redis.PubSub {
	n.mu.Lock()
	channels := make([]string, 0, len(c.keys))
	for ch := range c.keys {
		channels = append(channels, ch)
	}
	n.mu.Unlock()
	if len(channels) == 0 {
		// Every key moved to another connection.
		n.forget(c)
		return nil
	}
	ps := n.newPubSub(channels...)
	n.mu.Lock()
	if n.closed.Load() {
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
func (n *Notifier) forget(c *subConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c.node] == c {
		delete(n.conns, c.node)
	}
	for ch, q := range c.keys {
		if q.idle() {
			delete(c.keys, ch)
			delete(n.keys, ch)
			n.active.Add(-1)
		}
	}
}

// reap unsubscribes c's keys idle for longer than notifyLinger and, when
// none is left, closes the connection. It reports whether the dispatcher
// should return.
func (n *Notifier) reap(c *subConn, ps *redis.PubSub, now time.Time) bool {
	n.mu.Lock()
	var idle []string
	for ch, q := range c.keys {
		if q.idle() && now.Sub(q.idleSince) > notifyLinger {
			idle = append(idle, ch)
			delete(c.keys, ch)
			delete(n.keys, ch)
			n.active.Add(-1)
		}
	}
	last := len(c.keys) == 0
	if last && n.conns[c.node] == c {
		delete(n.conns, c.node)
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
