package notify

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster: which node's connection a channel is subscribed on, and
// how a Notifier's subscriptions follow a slot that moved (rehome).

// sharded reports whether this is Redis Cluster, whose release
// announcements go through sharded pub/sub.
func (n *Notifier) sharded() bool { return n.cluster != nil }

// nodeOf names the node that serves channel's slot: on Redis Cluster the
// address of its master as the cluster client knows it (it asks the
// cluster only when it knows nothing yet); "" elsewhere, or when the
// cluster cannot say.
func (n *Notifier) nodeOf(ctx context.Context, channel string) string {
	if n.cluster == nil {
		return ""
	}
	master, err := n.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return ""
	}
	return master.Options().Addr
}

// reload makes a cluster client learn again which master owns which slot,
// in the background; elsewhere it does nothing. It reports whether it
// did anything.
func (n *Notifier) reload(ctx context.Context) bool {
	if n.cluster == nil {
		return false
	}
	n.cluster.ReloadState(ctx)
	return true
}

// rehome moves the keys of c whose channels another node owns now to that
// node's connection, subscribing them there.
func (n *Notifier) rehome(c *subConn) {
	n.mu.Lock()
	channels := make([]string, 0, len(c.keys))
	for ch := range c.keys {
		channels = append(channels, ch)
	}
	n.mu.Unlock()
	nodes := make([]string, len(channels))
	for i, ch := range channels {
		nodes[i] = n.nodeOf(n.ctx, ch)
	}
	type subscription struct {
		ps *redis.PubSub
		ch string
	}
	var moved []subscription
	n.mu.Lock()
	for i, ch := range channels {
		q := c.keys[ch]
		if q == nil || nodes[i] == c.node {
			continue
		}
		delete(c.keys, ch)
		q.subscribed = false
		if ps := n.subscribeLocked(q, nodes[i]); ps != nil {
			moved = append(moved, subscription{ps, ch})
		}
	}
	n.mu.Unlock()
	for _, m := range moved {
		_ = n.subscribe(n.ctx, m.ps, m.ch)
	}
}
