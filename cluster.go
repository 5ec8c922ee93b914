package locksmith

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster: where scripts that name a lock's handoff queue go, and
// what a refusal while a slot moves means.

// queueClient returns the client for scripts that name a lock's handoff
// queue: s.client, or on Redis Cluster the client of the master that owns
// key's slot. The cluster client must not send them: while a slot
// migrates, a script naming a key that does not exist (the queue mostly
// does not) is refused with TRYAGAIN, which the cluster client retries on
// other nodes and then marks the master as failing. The master's own
// client returns the refusal, or a redirection once the slot has moved,
// and the caller falls back to a script over the lock key alone, which
// the cluster client sends wherever the key is (see clusterRefused).
func (s scriptStore) queueClient(ctx context.Context, key string) (redis.UniversalClient, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return s.client, nil
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoMaster, err)
	}
	return master, nil
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
