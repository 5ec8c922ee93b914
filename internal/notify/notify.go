// Package notify is a Locker's notifier: the pub/sub connections on which
// it hears release announcements, the goroutines that read them, and the
// per-key FIFO queues of its waiters that the announcements wake. The
// wait loop that drives a waiter through its queue, and the handoffs and
// attempts themselves, belong to the root package (see its acquire.go and
// handoff.go); this package only says who tries when, and what was heard.
//
// A Notifier is safe for concurrent use. It does no network I/O under its
// mutex: a SUBSCRIBE that a call must send is sent after the mutex is
// released, and every other read and write of a connection is its
// dispatcher's.
package notify

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// A Notifier multiplexes the release announcements of one Locker's keys
// onto pub/sub connections, and queues the Locker's waiters per key. With
// one server (or Sentinel) all keys share one connection. On Redis
// Cluster the keys of each shard share one connection to its master,
// since a connection can subscribe only to sharded channels of the node
// it talks to; when a slot moves, its keys move to the connection of the
// shard that owns it now.
//
// Close must be called to stop its goroutines.
type Notifier struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless the client is a cluster client

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
	// done is closed by Close, to cut short a dispatcher's pause.
	done chan struct{}
	// ctx is the context of the dispatchers' I/O, cancelled by Close so
	// that a dial in progress ends.
	ctx    context.Context
	cancel context.CancelFunc

	// closed is set by Close, under mu: no dispatcher starts after it.
	// Calls read it without mu.
	closed atomic.Bool
	// dispatchers counts the running dispatcher goroutines, and spawned
	// the goroutines started by Spawn: Close waits for them.
	dispatchers sync.WaitGroup
	spawned     sync.WaitGroup

	// onConn is told of the connections' changes of state; nil when
	// nobody listens. Set by New, before any dispatcher starts.
	onConn func(ConnEvent)
}

// New returns a Notifier that subscribes through client. cluster is the
// same client as a cluster client when it is one, nil otherwise: its
// subscriptions are then sharded, one connection per master. onConn, if
// not nil, is told of every change of a connection's state (see
// ConnEvent), from the connection's dispatcher goroutine: it must not
// block.
func New(client redis.UniversalClient, cluster *redis.ClusterClient, onConn func(ConnEvent)) *Notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &Notifier{client: client, cluster: cluster, keys: make(map[string]*keyQueue),
		conns: make(map[string]*subConn), done: make(chan struct{}), ctx: ctx, cancel: cancel, onConn: onConn}
}

// IsClosed reports whether Close was called. It takes no lock.
func (n *Notifier) IsClosed() bool { return n.closed.Load() }

// Context returns a context cancelled by Close, for the I/O of work that
// Close must cut short (see Spawn).
func (n *Notifier) Context() context.Context { return n.ctx }

// Close stops every dispatcher and waits for them: it closes their
// connections and wakes every waiter and watcher, which then see that the
// Notifier is closed (IsClosed). It then waits for the goroutines started
// by Spawn. It is safe to call more than once.
func (n *Notifier) Close() {
	n.mu.Lock()
	if !n.closed.Load() {
		n.closed.Store(true)
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
	n.spawned.Wait()
}

// Spawn runs f on a goroutine of its own that Close waits for, unless the
// Notifier is closed, and reports whether it did. f must return soon
// after Context is cancelled.
func (n *Notifier) Spawn(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return false
	}
	n.spawned.Add(1)
	go func() {
		defer n.spawned.Done()
		f()
	}()
	return true
}

// Waiters returns how many waiters the queue of the key announced on ch
// holds, for tests that wait on it.
func (n *Notifier) Waiters(ch string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if q := n.keys[ch]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Heard reports, for tests, how many announcements and subscription
// confirmations the waiters of ch have heard, and whether any of them is
// told to try, due to try again, or has an attempt on its way: while busy
// is false, the head sleeps until its retry slot ends (or it hears more).
func (n *Notifier) Heard(ch string) (events uint64, busy bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.keys[ch]
	if q == nil {
		return 0, false
	}
	busy = q.woken != nil || q.pending
	for _, w := range q.waiters {
		busy = busy || w.trying
	}
	return q.events, busy
}
