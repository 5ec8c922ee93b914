package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// Elections against real redis-servers: the claims of Election's,
// Campaign's, Term's, Leader's and Observe's doc comments.

// campaigned is the outcome of a Campaign run in the background.
type campaigned struct {
	term *locksmith.Term
	err  error
	at   time.Time
	sent int // requests counted when Campaign returned, with a counter
}

// campaignInBackground runs e.Campaign in a goroutine that ends with it.
func campaignInBackground(ctx context.Context, e *locksmith.Election, cnt *counter, value string) <-chan campaigned {
	got := make(chan campaigned, 1)
	go func() {
		term, err := e.Campaign(ctx, value)
		c := campaigned{term: term, err: err, at: time.Now()}
		if cnt != nil {
			c.sent = cnt.count()
		}
		got <- c
	}()
	return got
}

func receiveTerm(t *testing.T, got <-chan campaigned, what string) campaigned {
	t.Helper()
	select {
	case c := <-got:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Campaign did not return", what)
	}
	return campaigned{}
}

// nextLeader waits for the observer to post a leader that satisfies ok.
func nextLeader(t *testing.T, obs <-chan locksmith.Leader, what string, ok func(locksmith.Leader) bool) locksmith.Leader {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, open := <-obs:
			if !open {
				t.Fatalf("%s: the observer's channel closed", what)
			}
			if ok(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("%s: not observed", what)
		}
	}
}

func TestElectionCampaignLeaderResign(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	name := uniqueKey(t)
	e := newLocker(t, srv.Client(t)).Election(name)

	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, locksmith.ErrNoLeader)

	term, err := e.Campaign(ctx, "host-a:8080")
	require.NoError(t, err)
	require.Equal(t, "host-a:8080", term.Value())
	require.Positive(t, term.Fence(), "a term always has a fence")
	require.NoError(t, term.Context().Err())
	require.Same(t, term.Lock, locksmith.LockFromContext(term.Context()))
	require.True(t, strings.HasSuffix(raw.Get(ctx, name).Val(), " host-a:8080"), "the lock holds the value")

	l, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "host-a:8080", l.Value)
	require.Equal(t, term.Fence(), l.Fence)
	require.Positive(t, l.TTL)

	require.NoError(t, term.Proclaim(ctx, "host-a:9090"))
	require.Equal(t, "host-a:9090", term.Value())
	l, err = e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "host-a:9090", l.Value)
	k := names(t, "", name)
	leaderTTL := raw.PTTL(ctx, k.Leader).Val()
	require.Positive(t, leaderTTL, "the proclaimed value expires with the term")

	require.NoError(t, term.Resign(ctx))
	require.ErrorIs(t, context.Cause(term.Context()), locksmith.ErrResigned)
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, locksmith.ErrNoLeader)
	require.Zero(t, raw.Exists(ctx, k.Lock, k.Queue, k.Leader).Val(), "a resigned term leaves nothing but the fence counter")
	require.ErrorIs(t, term.Resign(ctx), locksmith.ErrNotHeld)
	require.ErrorIs(t, term.Proclaim(ctx, "x"), locksmith.ErrNotHeld)
}

func TestElectionProclaimedValueFollowsRenewals(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	name := uniqueKey(t)
	k := names(t, "", name)
	const ttl = 300 * time.Millisecond
	e := newLocker(t, srv.Client(t)).Election(name, locksmith.WithTTL(ttl))
	term, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	defer func() { _ = term.Resign(ctx) }()
	require.NoError(t, term.Proclaim(ctx, "b"))
	// Wait for two renewals (the Deadline moves), past the value's first
	// TTL: the value must still be there.
	first := term.Deadline()
	eventually(t, 5*time.Second, func() bool { return term.Deadline().After(first.Add(ttl)) }, "two renewals")
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", l.Value)
	require.Positive(t, raw.PTTL(ctx, k.Leader).Val())
}

func TestElectionResignHandsOver(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	name := uniqueKey(t)

	leader, err := newLocker(t, srv.Client(t)).Election(name).Campaign(ctx, "a")
	require.NoError(t, err)

	cnt, done := &counter{}, &scripts{}
	cl := checked(t, newLocker(t, newClient(t, srv.Options(), []redis.Hook{cnt, done})), &done.n)
	cnt.reset()
	got := campaignInBackground(ctx, cl.Election(name), cnt, "b")
	waitQueued(t, raw, name, 1)
	done.wait(t, 2)
	before := cnt.count()

	require.NoError(t, leader.Resign(ctx))
	c := receiveTerm(t, got, "candidate")
	require.NoError(t, c.err)
	// The handoff needs no request: the release announced it to
	// observers too.
	require.Equal(t, before, c.sent, "the candidate sent requests after the resignation: %v", cnt.all())
	require.Greater(t, c.term.Fence(), leader.Fence())
	l, err := cl.Election(name).Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", l.Value)
	require.Equal(t, c.term.Fence(), l.Fence)
	require.NoError(t, c.term.Resign(ctx))
}

func TestElectionCrashedLeaderTakenOver(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	const ttl = 400 * time.Millisecond

	// The leader's client is closed: its renewals fail, as a crashed or
	// cut-off leader's would.
	leaderClient := redis.NewClient(srv.Options())
	leader, err := newLocker(t, leaderClient).Election(name, locksmith.WithTTL(ttl)).Campaign(ctx, "a")
	require.NoError(t, err)
	got := campaignInBackground(ctx, newLocker(t, srv.Client(t)).Election(name, locksmith.WithTTL(ttl)), nil, "b")
	waitQueued(t, srv.Client(t), name, 1)
	require.NoError(t, leaderClient.Close())

	c := receiveTerm(t, got, "candidate")
	require.NoError(t, c.err)
	defer func() { _ = c.term.Resign(ctx) }()
	<-leader.Context().Done()
	require.ErrorIs(t, context.Cause(leader.Context()), locksmith.ErrLockLost)
	require.False(t, c.at.Before(leader.Deadline()),
		"the candidate leads from %v, before the old leader's Deadline %v", c.at, leader.Deadline())
	require.Greater(t, c.term.Fence(), leader.Fence())
	// Within the TTL plus the delay (here the TTL, since every attempt
	// learns the leader's TTL) and scheduling.
	require.Less(t, c.at.Sub(leader.Deadline()), ttl+time.Second)
}

func TestElectionObserve(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	observer := newLocker(t, srv.Client(t))
	obs, err := observer.Election(name).Observe(ctx)
	require.NoError(t, err)
	nextLeader(t, obs, "nobody", func(l locksmith.Leader) bool { return l == (locksmith.Leader{}) })
	k := names(t, "", name)
	waitSubscribed(t, srv.Client(t), k.Channel, 1)

	a := newLocker(t, srv.Client(t)).Election(name)
	b := newLocker(t, srv.Client(t)).Election(name)
	ta, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	got := nextLeader(t, obs, "a", func(l locksmith.Leader) bool { return l.Value == "a" })
	require.Equal(t, ta.Fence(), got.Fence)

	require.NoError(t, ta.Proclaim(ctx, "a2"))
	nextLeader(t, obs, "a2", func(l locksmith.Leader) bool { return l.Value == "a2" })

	gb := campaignInBackground(ctx, b, nil, "b")
	waitQueued(t, srv.Client(t), name, 1)
	require.NoError(t, ta.Resign(ctx))
	tb := receiveTerm(t, gb, "b")
	require.NoError(t, tb.err)
	got = nextLeader(t, obs, "b", func(l locksmith.Leader) bool { return l.Value == "b" })
	require.Equal(t, tb.term.Fence(), got.Fence)

	require.NoError(t, tb.term.Resign(ctx))
	nextLeader(t, obs, "nobody again", func(l locksmith.Leader) bool { return l == (locksmith.Leader{}) })

	// Closing the Locker stops the observer and closes its channel.
	require.NoError(t, observer.Close())
	for range obs {
	}
	_, err = observer.Election(name).Observe(ctx)
	require.ErrorIs(t, err, locksmith.ErrClosed)
}

func TestElectionObserveSeesExpiry(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	leaderClient := redis.NewClient(srv.Options())
	term, err := newLocker(t, leaderClient).Election(name, locksmith.WithTTL(300*time.Millisecond)).Campaign(ctx, "a")
	require.NoError(t, err)
	octx, cancel := context.WithCancel(ctx)
	obs, err := newLocker(t, srv.Client(t)).Election(name).Observe(octx)
	require.NoError(t, err)
	nextLeader(t, obs, "a", func(l locksmith.Leader) bool { return l.Value == "a" })
	require.NoError(t, leaderClient.Close()) // the leader dies
	nextLeader(t, obs, "nobody after the TTL", func(l locksmith.Leader) bool { return l == (locksmith.Leader{}) })
	<-term.Context().Done()
	cancel()
	for range obs {
	}
}

func TestElectionFencesIncrease(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	lockers := []*locksmith.Locker{newLocker(t, srv.Client(t)), newLocker(t, srv.Client(t))}
	var last int64
	for i := range 20 {
		term, err := lockers[i%2].Election(name).Campaign(ctx, "v")
		require.NoError(t, err)
		require.Greater(t, term.Fence(), last, "term %d", i)
		last = term.Fence()
		require.NoError(t, term.Resign(ctx))
	}
}

func TestElectionRunOneLeaderAtATime(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueKey(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		inside, terms, overlaps atomic.Int64
		lastFence               atomic.Int64
		wg                      sync.WaitGroup
		errs                    = make(chan error, 6)
	)
	for i := range 6 {
		l := newLocker(t, srv.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.Election(name, locksmith.WithTTL(time.Second)).Run(ctx, string(rune('a'+i)), func(ctx context.Context, term *locksmith.Term) error {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				defer inside.Add(-1)
				if f := term.Fence(); f <= lastFence.Swap(f) {
					t.Errorf("fence %d does not increase", f)
				}
				if terms.Add(1) >= 60 {
					cancel()
				}
				return nil // done for this term: resign and campaign again
			})
		}()
	}
	wg.Wait()
	for range 6 {
		require.ErrorIs(t, <-errs, context.Canceled)
	}
	require.Zero(t, overlaps.Load(), "two leaders at once")
	require.GreaterOrEqual(t, terms.Load(), int64(60))
	_, err := newLocker(t, srv.Client(t)).Election(name).Leader(t.Context())
	require.ErrorIs(t, err, locksmith.ErrNoLeader, "Run resigns when ctx ends")
}

func TestElectionRunReturnsFnError(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueKey(t)
	boom := errors.New("boom")
	e := newLocker(t, srv.Client(t)).Election(name)
	err := e.Run(t.Context(), "a", func(context.Context, *locksmith.Term) error { return boom })
	require.ErrorIs(t, err, boom)
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, locksmith.ErrNoLeader, "Run resigned")
}

func TestElectionRunCampaignsAgainAfterLoss(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	raw := srv.Client(t)
	name := uniqueKey(t)
	e := newLocker(t, srv.Client(t)).Election(name, locksmith.WithTTL(time.Second))
	var termsSeen atomic.Int64
	err := e.Run(ctx, "a", func(ctx context.Context, term *locksmith.Term) error {
		if termsSeen.Add(1) == 1 {
			// Someone deletes the lock: the term is lost.
			require.NoError(t, raw.Del(context.Background(), name).Err())
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), locksmith.ErrLockLost)
			return ctx.Err()
		}
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(2), termsSeen.Load(), "Run campaigned again after the loss")
}

func TestElectionCancelledCampaignLeavesNothing(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	name := uniqueKey(t)
	leader, err := newLocker(t, srv.Client(t)).Election(name).Campaign(ctx, "a")
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	got := campaignInBackground(cctx, newLocker(t, srv.Client(t)).Election(name), nil, "b")
	waitQueued(t, raw, name, 1)
	cancel()
	c := receiveTerm(t, got, "candidate")
	require.ErrorIs(t, c.err, locksmith.ErrNotObtained)
	require.ErrorIs(t, c.err, context.Canceled)
	require.Empty(t, queueEntries(t, raw, name), "the candidate withdrew")
	require.NoError(t, leader.Resign(ctx))
}

func TestElectionInvalid(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	cnt := &counter{}
	c := srv.Options()
	client := newClient(t, c, []redis.Hook{cnt})
	l := newLocker(t, client)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"empty name", func() error { _, err := l.Election("").Campaign(ctx, "v"); return err }},
		{"reserved name", func() error { _, err := l.Election("~x").Leader(ctx); return err }},
		{"bad option", func() error { _, err := l.Election("x", locksmith.WithTTL(0)).Observe(ctx); return err }},
		{"long value", func() error { _, err := l.Election("x").Campaign(ctx, strings.Repeat("v", 4097)); return err }},
		{"nil fn", func() error { return l.Election("x").Run(ctx, "v", nil) }},
		{"quorum", func() error {
			_, err := newQuorumLocker(t, []redis.UniversalClient{client}).Election("x").Campaign(ctx, "v")
			return err
		}},
		{"zero Locker", func() error { _, err := (&locksmith.Locker{}).Election("x").Campaign(ctx, "v"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), locksmith.ErrInvalidArgument)
		})
	}
	require.Zero(t, cnt.count(), "invalid calls sent %v", cnt.all())

	closed := newLocker(t, client)
	require.NoError(t, closed.Close())
	_, err := closed.Election("x").Campaign(ctx, "v")
	require.ErrorIs(t, err, locksmith.ErrClosed)
	require.Zero(t, cnt.count(), "calls on a closed Locker sent %v", cnt.all())
}

func TestElectionOnCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	ctx := t.Context()
	for _, name := range []string{uniqueKey(t), "{" + uniqueKey(t) + "}:x"} {
		t.Run(name, func(t *testing.T) {
			obs, err := newLocker(t, cl.Client(t)).Election(name).Observe(ctx)
			require.NoError(t, err)
			nextLeader(t, obs, "nobody", func(l locksmith.Leader) bool { return l == (locksmith.Leader{}) })
			waitShardSubscribed(t, cl, names(t, "", name).Channel, 1)

			a, err := newLocker(t, cl.Client(t)).Election(name).Campaign(ctx, "a")
			require.NoError(t, err)
			nextLeader(t, obs, "a", func(l locksmith.Leader) bool { return l.Value == "a" })
			require.NoError(t, a.Proclaim(ctx, "a2"))
			nextLeader(t, obs, "a2", func(l locksmith.Leader) bool { return l.Value == "a2" })
			got := campaignInBackground(ctx, newLocker(t, cl.Client(t)).Election(name), nil, "b")
			waitShardSubscribed(t, cl, names(t, "", name).Channel, 2)
			require.NoError(t, a.Resign(ctx))
			b := receiveTerm(t, got, "b")
			require.NoError(t, b.err)
			require.Greater(t, b.term.Fence(), a.Fence())
			nextLeader(t, obs, "b", func(l locksmith.Leader) bool { return l.Value == "b" })
			require.NoError(t, b.term.Resign(ctx))
		})
	}
}

func TestElectionCandidatesServedInArrivalOrder(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	raw := srv.Client(t)
	name := uniqueKey(t)
	term, err := newLocker(t, srv.Client(t)).Election(name).Campaign(ctx, "first")
	require.NoError(t, err)
	var pending []<-chan campaigned
	for i, v := range []string{"b", "c", "d"} {
		pending = append(pending, campaignInBackground(ctx, newLocker(t, srv.Client(t)).Election(name), nil, v))
		waitQueued(t, raw, name, i+1)
	}
	for i, v := range []string{"b", "c", "d"} {
		require.NoError(t, term.Resign(ctx))
		c := receiveTerm(t, pending[i], v)
		require.NoError(t, c.err)
		require.Equal(t, v, c.term.Value(), "leadership went out of arrival order")
		term = c.term
	}
	require.NoError(t, term.Resign(ctx))
}

func TestElectionObserverEvents(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	name := uniqueKey(t)
	l, rec := observed(t, srv.Client(t), locksmith.WithTTL(300*time.Millisecond))
	term, err := l.Election(name).Campaign(ctx, "a")
	require.NoError(t, err)
	won := rec.waitFor(t, "the term's obtain", kindKey(locksmith.EventObtain, name))
	require.Equal(t, locksmith.HoldTerm, won.Hold)
	require.NoError(t, won.Err)
	rec.waitFor(t, "a renewal of the term", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventRenewal && e.Key == name && e.Hold == locksmith.HoldTerm
	})
	require.NoError(t, term.Resign(ctx))
	gone := rec.waitFor(t, "the resignation", kindKey(locksmith.EventRelease, name))
	require.Equal(t, locksmith.HoldTerm, gone.Hold)
	require.NoError(t, gone.Err)
	for _, e := range rec.all() {
		require.NotContains(t, fmt.Sprintf("%+v", e), term.Token(), "an event carries the token")
	}
}

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
