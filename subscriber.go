package locksmith

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The subscriber: the pub/sub connections on which a Locker hears release
// announcements, and the goroutines that read them (see wait.go for what
// the announcements do).

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

// notifier multiplexes the release announcements of one Locker's keys
// onto pub/sub connections, and queues the Locker's waiters per key. With
// one server (or Sentinel) all keys share one connection. On Redis
// Cluster the keys of each shard share one connection to its master,
// since a connection can subscribe only to sharded channels of the node
// it talks to; when a slot moves, its keys move to the connection of the
// shard that owns it now.
type notifier struct {
	topology

	// active counts the keys with a queue, so that an Obtain on a Locker
	// that waits for nothing skips the lookup.
	active atomic.Int64
	// rtt estimates, in nanoseconds, how long the waiters' attempts take
	// on a quiet path: how long a Locker defers to its rivals.
	rtt atomic.Int64

	mu   sync.Mutex           // guards the fields below, every keyQueue and every subConn
	keys map[string]*keyQueue // by channel
	// conns are the connections, by node: "" when not sharded (there is
	// at most one), otherwise the address of the master that owns their
	// channels' slots (as the cluster client last knew it).
	conns map[string]*subConn
	// done is closed by close, to cut short a dispatcher's pause.
	done chan struct{}
	// ctx is the context of the dispatchers' I/O, cancelled by close so
	// that a dial in progress ends.
	ctx    context.Context
	cancel context.CancelFunc

	// isClosed is set by close, under mu: no dispatcher starts after
	// it. Calls read it without mu.
	isClosed atomic.Bool
	// dispatchers counts the running dispatcher goroutines, and
	// electionObservers the goroutines of Election.Observe (see spawn):
	// close waits for them.
	dispatchers       sync.WaitGroup
	electionObservers sync.WaitGroup

	// obs is the Locker's observer, nil when there is none; set by New
	// before any dispatcher starts.
	obs *observer
}

// subConn is one pub/sub connection and the keys subscribed on it. Its
// dispatcher goroutine, started with it, dials it and reads it until it
// has no keys left (or the Locker or the client is closed), and then
// closes it; the dispatcher does all of its I/O but the SUBSCRIBE of a key
// added while it is up, which the caller that adds the key sends.
type subConn struct {
	node string               // its key in notifier.conns
	ps   *redis.PubSub        // nil until the dispatcher has dialed it
	keys map[string]*keyQueue // by channel: the keys it should be subscribed to
	// up is false while the connection is known to be down; its keys are
	// subscribed again when it comes back.
	up bool
}

func newNotifier(t topology) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{topology: t, keys: make(map[string]*keyQueue),
		conns: make(map[string]*subConn), done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// subscribeLocked adds q's channel to a connection's keys, starting a
// connection and its dispatcher if needed, which subscribes it. It sends
// nothing: it returns the connection on which the caller, once it has
// released mu, must send the SUBSCRIBE, if one is up (nil otherwise). The
// confirmation, read by the dispatcher, sets q.subscribed; until then the
// key's waiters poll. After close nothing starts, and the waiters poll
// until they see that the Locker is closed.
func (n *notifier) subscribeLocked(q *keyQueue, node string) *redis.PubSub {
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
	if n.isClosed.Load() {
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
func (n *notifier) newPubSub(channels ...string) *redis.PubSub {
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
func (n *notifier) subscribe(ctx context.Context, ps *redis.PubSub, channels ...string) error {
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
func (n *notifier) unsubscribe(ps *redis.PubSub, channels ...string) error {
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
// the Locker or the client is closed.
func (n *notifier) dispatch(c *subConn) {
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
			// Closed by close, or the client was.
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
func (n *notifier) down(c *subConn) {
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
// notifier was closed meanwhile.
func (n *notifier) replace(c *subConn, old *redis.PubSub) *redis.PubSub {
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
// returns the connection, or nil, having closed it, when the notifier
// was closed meanwhile.
func (n *notifier) connect(c *subConn) *redis.PubSub {
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
	if n.isClosed.Load() {
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

// close stops every dispatcher and waits for them: it closes their
// connections and wakes every waiter, which then sees that the Locker is
// closed. It is safe to call more than once.
func (n *notifier) close() {
	n.mu.Lock()
	if !n.isClosed.Load() {
		n.isClosed.Store(true)
		close(n.done)
		n.cancel()
	}
	var conns []*redis.PubSub
	seen := make(map[*subConn]bool)
	add := func(c *subConn) {
		if c != nil && !seen[c] {
			seen[c] = true
			if c.ps != nil {
				conns = append(conns, c.ps)
			}
		}
	}
	for _, c := range n.conns {
		add(c)
	}
	for _, q := range n.keys {
		for _, w := range q.waiters {
			w.signal()
		}
		q.tellWatchers()
		add(q.conn)
	}
	n.mu.Unlock()
	for _, ps := range conns {
		_ = ps.Close()
	}
	n.dispatchers.Wait()
	n.electionObservers.Wait()
}

// reap unsubscribes c's keys idle for longer than notifyLinger and, when
// none is left, closes the connection. It reports whether the dispatcher
// should return.
func (n *notifier) reap(c *subConn, ps *redis.PubSub, now time.Time) bool {
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
