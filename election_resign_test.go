package locksmith_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A Resign that Redis does not answer leaves leadership to pass when the
// lock's TTL runs out, as Resign's doc says: the term, whose context is
// cancelled with ErrResigned, must not go on renewing the lock. (Found by
// the CLI's elect, which campaigns again after resigning and waited behind
// its own term.)
func TestElectionFailedResignLetsLeadershipExpire(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	const ttl = 600 * time.Millisecond
	f := &fault{}
	e := newLocker(t, newClient(t, srv.Options(), []redis.Hook{f})).Election(name, locksmith.WithTTL(ttl))
	term, err := e.Campaign(ctx, "a")
	require.NoError(t, err)

	f.failScripts.Store(true)
	require.Error(t, term.Resign(ctx), "Resign with its script failing")
	f.failScripts.Store(false) // Redis answers again
	require.ErrorIs(t, context.Cause(term.Context()), locksmith.ErrResigned)

	cctx, cancel := context.WithTimeout(ctx, 5*ttl)
	defer cancel()
	other, err := newLocker(t, srv.Client(t)).Election(name, locksmith.WithTTL(ttl)).Campaign(cctx, "b")
	require.NoError(t, err, "a term whose Resign failed still leads %v later: its renewal resumed", 5*ttl)
	require.NoError(t, other.Resign(ctx))
}
