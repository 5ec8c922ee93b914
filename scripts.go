package locksmith

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts run with EVALSHA, falling back to EVAL when the server
// answers NOSCRIPT (its script cache was flushed, or it is a new primary
// after a failover), so callers never see that error. Each script touches
// exactly one key, passed in KEYS, so it runs on Redis Cluster too.
var (
	//go:embed obtain.lua
	obtainSrc    string
	obtainScript = redis.NewScript(obtainSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)

	//go:embed pttl.lua
	pttlSrc    string
	pttlScript = redis.NewScript(pttlSrc)
)

// pttlNotHeld is what pttl.lua returns when the caller does not hold the lock.
const pttlNotHeld = -3

// A store runs the lock primitives against one Redis deployment. Each
// method touches one lock key in one round trip (two when the server first
// answers NOSCRIPT), and reports a Redis failure as an error, never as the
// lock being held or not held. It is the seam behind which other
// deployments (a quorum of independent servers) can stand.
type store interface {
	// acquire sets rkey to token with the TTL if rkey is free or already
	// holds token, and then, if fenceKey is not empty, returns the next
	// fencing token from the counter at fenceKey. Otherwise it reports the
	// holder's remaining TTL, which is negative when the key has no expiry.
	acquire(ctx context.Context, rkey, fenceKey, token string, ttl time.Duration) (ok bool, fence int64, holderTTL time.Duration, err error)
	// release deletes rkey if it holds token, announces the release to
	// waiters in the same step, and reports whether it did.
	release(ctx context.Context, rkey, token string) (bool, error)
	// refresh sets rkey's TTL if it holds token, and reports whether it did.
	refresh(ctx context.Context, rkey, token string, ttl time.Duration) (bool, error)
	// pttl returns rkey's remaining TTL if it holds token.
	pttl(ctx context.Context, rkey, token string) (ttl time.Duration, held bool, err error)
}

// scriptStore is the store of a single Redis server, Sentinel group or
// cluster, reached through one go-redis client.
type scriptStore struct {
	client redis.UniversalClient
}

var _ store = scriptStore{}

func (s scriptStore) acquire(ctx context.Context, rkey, fenceKey, token string, ttl time.Duration) (bool, int64, time.Duration, error) {
	keys := []string{rkey}
	if fenceKey != "" {
		keys = append(keys, fenceKey)
	}
	res, err := obtainScript.Run(ctx, s.client, keys, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, 0, 0, err
	}
	if res < 0 {
		return false, 0, time.Duration(-2-res) * time.Millisecond, nil
	}
	return true, res, 0, nil
}

func (s scriptStore) release(ctx context.Context, rkey, token string) (bool, error) {
	res, err := releaseScript.Run(ctx, s.client, []string{rkey}, token, releaseChannel(rkey)).Int64()
	return res == 1, err
}

func (s scriptStore) refresh(ctx context.Context, rkey, token string, ttl time.Duration) (bool, error) {
	res, err := refreshScript.Run(ctx, s.client, []string{rkey}, token, ttl.Milliseconds()).Int64()
	return res == 1, err
}

func (s scriptStore) pttl(ctx context.Context, rkey, token string) (time.Duration, bool, error) {
	res, err := pttlScript.Run(ctx, s.client, []string{rkey}, token).Int64()
	if err != nil || res == pttlNotHeld {
		return 0, false, err
	}
	return time.Duration(res) * time.Millisecond, true, nil
}
