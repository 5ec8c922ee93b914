package locksmith

import (
	"context"
	"time"
)

// Watchers: listeners to everything announced on a key's channel, on the
// Locker's shared pub/sub connection, for an election's observers (see
// Election.Observe). A watcher keeps its key subscribed; it is told of
// every announcement (releases, handoffs, news) and of every change of
// the subscription, and then reads what it needs from Redis itself.

// newsMark starts an announcement that tells watchers only, such as an
// election's new leader or value: nothing was released, so waiters ignore
// it.
const newsMark = "!"

// watcher is one listener to a key's channel.
type watcher struct {
	q *keyQueue
	// wake has room for one signal: that something was heard, or that the
	// subscription changed.
	wake chan struct{}
}

// tellWatchers signals every watcher of q; mu is held.
func (q *keyQueue) tellWatchers() {
	for _, w := range q.watchers {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// watch starts listening to the channel ch. Its subscription is set up in
// the background, as a waiter's is (see join), and the SUBSCRIBE, when
// the connection is up, is sent under ctx; until the server confirms it,
// listening reports false, and the watcher should poll. unwatch must end
// it.
func (n *notifier) watch(ctx context.Context, ch string) *watcher {
	node := n.nodeFor(ctx, ch)
	n.mu.Lock()
	q, _, subscribeOn := n.keyLocked(ch, node)
	w := &watcher{q: q, wake: make(chan struct{}, 1)}
	q.watchers = append(q.watchers, w)
	n.mu.Unlock()
	if subscribeOn != nil {
		_ = n.subscribe(ctx, subscribeOn, ch)
	}
	return w
}

// listening reports whether w's channel is subscribed: whether w hears
// what is announced on it from now on.
func (n *notifier) listening(w *watcher) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return w.q.subscribed
}

// unwatch stops w; its key stays subscribed for a while (notifyLinger)
// when nobody else waits for or watches it.
func (n *notifier) unwatch(w *watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := w.q
	for i, o := range q.watchers {
		if o == w {
			q.watchers = append(q.watchers[:i], q.watchers[i+1:]...)
			break
		}
	}
	if q.idle() {
		q.watchers = nil
		q.idleSince = time.Now()
	}
}

// news publishes msg, which starts with newsMark, on ch: on Redis
// Cluster with SPUBLISH, to the shard of ch's slot.
func (s scriptStore) news(ctx context.Context, ch, msg string) error {
	if s.sharded() {
		return s.client.Do(ctx, "spublish", ch, msg).Err()
	}
	return s.client.Publish(ctx, ch, msg).Err()
}

// spawn runs f on a goroutine of its own that close waits for, unless the
// notifier is closed, and reports whether it did. f must return soon
// after n.ctx is cancelled.
func (n *notifier) spawn(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isClosed.Load() {
		return false
	}
	n.electionObservers.Add(1)
	go func() {
		defer n.electionObservers.Done()
		f()
	}()
	return true
}
