package locksmith_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// (In a file of its own: the fault proxy is Linux-only.)

// TestQuorumAsksEveryMasterAtOnce shows that a quorum's Obtain and Release
// ask the masters in parallel, so that each costs one round trip however
// many masters there are: a proxy in front of each master holds back what
// it receives, and every one of them receives its request before any
// master has answered. Asked one after the other, only the first master
// would have been asked.
func TestQuorumAsksEveryMasterAtOnce(t *testing.T) {
	ctx := t.Context()
	var proxies []*faults.Proxy
	var clients []redis.UniversalClient
	for range 3 {
		srv := redistest.New(t)
		p, err := faults.NewProxy(srv.Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies = append(proxies, p)
		clients = append(clients, newClient(t, &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1}, nil))
	}
	l := newQuorumLocker(t, clients)
	key := uniqueKey(t)
	// The first call checks the masters and opens the connections.
	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	// heldAtOnce runs op while every proxy holds back what it receives,
	// waits until each has received something, and then lets it all
	// through.
	heldAtOnce := func(what string, op func() error) {
		for _, p := range proxies {
			p.Blackhole(true)
		}
		done := make(chan error, 1)
		go func() { done <- op() }()
		eventually(t, 10*time.Second, func() bool {
			for _, p := range proxies {
				if p.Held(faults.ToServer) == 0 {
					return false
				}
			}
			return true
		}, "%s: not every master was asked before the first answered", what)
		for _, p := range proxies {
			p.Heal()
		}
		require.NoError(t, <-done, what)
	}
	heldAtOnce("Obtain", func() error { lk, err = l.Obtain(ctx, key); return err })
	heldAtOnce("Release", func() error { return lk.Release(ctx) })
}
