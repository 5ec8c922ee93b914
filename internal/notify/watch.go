package notify

import (
	"context"
	"time"
)

// Watchers: listeners to everything announced on a key's channel, on the
// Locker's shared pub/sub connection, for an election's observers (see
// Election.Observe). A watcher keeps its key subscribed; it is told of
// every announcement (releases, handoffs, news) and of every change of
// the subscription, and then reads what it needs from Redis itself.

// NewsMark starts an announcement that tells watchers only, such as an
// election's new leader or value: nothing was released, so waiters ignore
// it.
const NewsMark = "!"

// A Watcher is one listener to a key's channel, from Watch until Unwatch.
type Watcher struct {
	q *keyQueue
	// wake has room for one signal: that something was heard, or that the
	// subscription changed.
	wake chan struct{}
}

// Wake returns the channel on which w is told that something was heard on
// its channel, that its subscription changed, or that the Notifier was
// closed. It holds one signal at most, and is never closed.
func (w *Watcher) Wake() <-chan struct{} { return w.wake }

// tellWatchers signals every watcher of q; mu is held.
func (q *keyQueue) tellWatchers() {
	for _, w := range q.watchers {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Watch starts listening to the channel ch. Its subscription is set up in
// the background, as a waiter's is (see Join), and the SUBSCRIBE, when
// the connection is up, is sent under ctx; until the server confirms it,
// Listening reports false, and the watcher should poll. Unwatch must end
// it.
func (n *Notifier) Watch(ctx context.Context, ch string) *Watcher {
	node := n.nodeFor(ctx, ch)
	n.mu.Lock()
	q, _, subscribeOn := n.keyLocked(ch, node)
	w := &Watcher{q: q, wake: make(chan struct{}, 1)}
	q.watchers = append(q.watchers, w)
	n.mu.Unlock()
	if subscribeOn != nil {
		_ = n.subscribe(ctx, subscribeOn, ch)
	}
	return w
}

// Listening reports whether w's channel is subscribed: whether w hears
// what is announced on it from now on.
func (n *Notifier) Listening(w *Watcher) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return w.q.subscribed
}

// Unwatch stops w; its key stays subscribed for a while (notifyLinger)
// when nobody else waits for or watches it.
func (n *Notifier) Unwatch(w *Watcher) {
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
