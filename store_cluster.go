package locksmith

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster: where keys and channels live, where scripts that name a
// lock's handoff queue go, and what a refusal while a slot moves means
// (how a Locker's subscriptions follow a slot that moved is the
// notifier's: see internal/notify). This is the one place that asks what
// kind of client it was given.

// topology is a client and, when it is a Redis Cluster client, the same
// client as such: the store routes by it, and the notifier is made with
// both (see newNotifier).
type topology struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless the client is a cluster client
}

func topologyOf(client redis.UniversalClient) topology {
	cc, _ := client.(*redis.ClusterClient)
	return topology{client: client, cluster: cc}
}

// sharded reports whether this is Redis Cluster, whose release
// announcements go through sharded pub/sub.
func (t topology) sharded() bool { return t.cluster != nil }

// master returns the client of the master that owns key's slot on Redis
// Cluster, and the client itself elsewhere.
func (t topology) master(ctx context.Context, key string) (redis.UniversalClient, error) {
	if t.cluster == nil {
		return t.client, nil
	}
	master, err := t.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoMaster, err)
	}
	return master, nil
}

// viaMaster runs send, a script that names a lock's handoff queue, with
// the client of the master that owns key's slot on Redis Cluster (s.client
// elsewhere); when the cluster refuses it (see clusterRefused), it runs
// alone instead, the same step over the lock key alone, without the queue.
// The cluster client must not send such scripts: while a slot migrates, a
// script naming a key that does not exist (the queue mostly does not) is
// refused with TRYAGAIN, which the cluster client retries on other nodes
// and then marks the master as failing. The master's own client returns
// the refusal, or a redirection once the slot has moved, and alone, sent
// through the cluster client, follows the lock key wherever it is.
func viaMaster[T any](ctx context.Context, s redisStore, key string,
	send func(c redis.UniversalClient) (T, error), alone func() (T, error)) (T, error) {
	c, err := s.master(ctx, key)
	var res T
	if err == nil {
		res, err = send(c)
	}
	if s.sharded() && clusterRefused(err) {
		return alone()
	}
	return res, err
}

// errNoMaster marks a failure to find the master of a slot.
var errNoMaster = errors.New("no master for the lock's slot")

// clusterRefused reports whether err is Redis Cluster refusing a script
// sent to a slot's master by its own client: the slot is migrating
// (TRYAGAIN, ASK), has moved (MOVED), or its master is unknown. A script
// over the lock key alone, through the cluster client, then follows the
// key.
func clusterRefused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errNoMaster) {
		return true
	}
	for _, p := range []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
