package notify

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/leakcheck"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(leakcheck.After(code))
}

// The notifier driven by fake events, on the stand-in connection of
// fakeNotifier (see queue_test.go): what each item heard does to the
// queues and watchers, without Redis.

// queuedJoin joins a waiter whose attempt, sent just now, queued it for
// handoffs.
func queuedJoin(n *Notifier, ch, token string) *Waiter {
	return n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, token, true, false, time.Now())
}

func TestTicketFastPath(t *testing.T) {
	n, _ := fakeNotifier(t)
	require.Equal(t, Ticket{}, n.Ticket("c"), "no key is active")
	allocs := testing.AllocsPerRun(100, func() { _ = n.Ticket("c") })
	require.Zero(t, allocs, "allocations of a Ticket with no key active")

	w := joinFake(n, "c", "t1")
	tk := n.Ticket("c")
	require.True(t, tk.Queued && tk.Existed, "got %+v", tk)
	require.Equal(t, Ticket{}, n.Ticket("other"), "another key")
	n.Leave(w)
	tk = n.Ticket("c")
	require.True(t, tk.Existed && !tk.Queued, "the key lingers, with nobody queued: got %+v", tk)
}

// TestJoinMakesUpForAReleaseMissed: a release announced after a caller's
// ticket and before it joined woke nobody; its join wakes the head.
func TestJoinMakesUpForAReleaseMissed(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w1 := joinFake(n, ch, "t1")
	n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
	require.True(t, woken(w1))
	n.Lost(w1, Attempt{HolderTTL: time.Minute}, time.Now())
	n.Leave(w1) // the key lingers, subscribed

	tk := n.Ticket(ch)
	n.handle(c, &redis.Message{Channel: ch, Payload: ""}) // nobody to wake
	w2 := n.Join(context.Background(), ch, tk, Attempt{HolderTTL: time.Minute}, "t2", false, false, time.Now())
	require.True(t, woken(w2), "the release between the ticket and the join did not wake the new head")
	tryNow, _, _ := n.Plan(w2)
	require.True(t, tryNow)

	// With no announcement in between, the joiner sleeps.
	n.Lost(w2, Attempt{HolderTTL: time.Minute}, time.Now())
	tk = n.Ticket(ch)
	w3 := n.Join(context.Background(), ch, tk, Attempt{HolderTTL: time.Minute}, "t3", false, false, time.Now())
	require.False(t, woken(w3) || woken(w2), "woken with nothing announced")
}

// TestHandoffsKeptForLateJoiners: a handoff heard before its waiter
// joined (its attempt's reply was still on its way) is found by the join,
// among the last handoffsKept.
func TestHandoffsKeptForLateJoiners(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	head := joinFake(n, ch, "head")
	payloads := []string{"1000 0 early"}
	for range handoffsKept {
		payloads = append(payloads, "1000 0 other")
	}
	payloads = append(payloads, "2000 3 late")
	for _, p := range payloads {
		n.handle(c, &redis.Message{Channel: ch, Payload: p})
	}
	require.False(t, woken(head), "a handoff to someone else woke the head")
	n.mu.Lock()
	kept := len(head.q.handedTo)
	n.mu.Unlock()
	require.Equal(t, handoffsKept, kept)

	late := queuedJoin(n, ch, "late")
	require.True(t, woken(late), "the late joiner was not told of its handoff")
	h, _ := n.TakeHandoff(late)
	require.Equal(t, &Handoff{Token: "late", TTL: 2 * time.Second, Fence: 3}, h)

	early := queuedJoin(n, ch, "early")
	h, _ = n.TakeHandoff(early)
	require.Nil(t, h, "a handoff older than the last %d was kept", handoffsKept)

	// A waiter that joins without an attempt was queued nowhere: a
	// handoff to its token cannot be its own.
	n.handle(c, &redis.Message{Channel: ch, Payload: "1000 0 unsent"})
	unsent := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "unsent", true, false, time.Time{})
	h, _ = n.TakeHandoff(unsent)
	require.Nil(t, h)
}

// TestMissedPermitHandoffs: a permit's attempt learns which of the peers
// it named hold one; they are told to try. PeersQueued names the peers
// whose entries may be live.
func TestMissedPermitHandoffs(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w1, w2, w3 := queuedJoin(n, ch, "t1"), queuedJoin(n, ch, "t2"), queuedJoin(n, ch, "t3")
	joinFake(n, ch, "t4") // joined without an attempt: queued nowhere
	require.ElementsMatch(t, []string{"t2", "t3"}, n.PeersQueued(w1))

	// w3 heard its handoff: it is not asked about.
	n.handle(c, &redis.Message{Channel: ch, Payload: "1000 0 t3"})
	require.True(t, woken(w3))
	require.Equal(t, []string{"t2"}, n.PeersQueued(w1))
	// Withdrawn entries are not asked about either.
	n.Withdrawn(w2)
	require.Empty(t, n.PeersQueued(w1))

	// w1's attempt learns that w2 holds a permit: w2 tries, out of turn.
	n.Lost(w1, Attempt{HolderTTL: -1, PeersHolding: []string{"t2"}}, time.Now())
	require.True(t, woken(w2))
	tryNow, _, head := n.Plan(w2)
	require.True(t, tryNow && !head, "got tryNow %v, head %v", tryNow, head)
	tryNow, _, _ = n.Plan(w2)
	require.False(t, tryNow, "the missed handoff is tried once")
}

// TestSharedWinKicksNext: a waiter for a shared hold that wins with more
// free lets the next try at once; a lock's waiter does not.
func TestSharedWinKicksNext(t *testing.T) {
	for _, shares := range []bool{false, true} {
		n, c := fakeNotifier(t)
		const ch = "c"
		w1 := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "t1", false, shares, time.Time{})
		w2 := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "t2", false, shares, time.Time{})
		n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
		require.True(t, woken(w1))
		n.Won(w1, time.Now().Add(time.Minute), true)
		require.True(t, woken(w2), "the new head is told (shares %v)", shares)
		tryNow, _, _ := n.Plan(w2)
		require.Equal(t, shares, tryNow, "the next waiter tries at once (shares %v)", shares)
	}
}

// TestFairnessDefersToRivals: after its own waiter held the lock, a
// Locker that recently lost a race to another lets the next release go
// to the others for about a round trip; without a rival it tries at once.
func TestFairnessDefersToRivals(t *testing.T) {
	for _, rival := range []bool{false, true} {
		n, c := fakeNotifier(t)
		n.Observe(2 * time.Millisecond)
		const ch = "c"
		w1, w2 := queuedJoin(n, ch, "t1"), queuedJoin(n, ch, "t2")
		n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
		require.True(t, woken(w1))
		if rival {
			// Woken, w1 lost the race: to another Locker.
			n.Lost(w1, Attempt{HolderTTL: time.Second}, time.Now())
		}
		// The lock is handed to w1 and w1 takes it: the lock is ours.
		n.handle(c, &redis.Message{Channel: ch, Payload: "1000 0 t1"})
		h, _ := n.TakeHandoff(w1)
		require.NotNil(t, h)
		n.Won(w1, time.Now().Add(time.Second), false)
		woken(w2)

		// w1's release, announced: w2 is woken either way.
		before := time.Now()
		n.handle(c, &redis.Message{Channel: ch, Payload: ""})
		require.True(t, woken(w2))
		tryNow, tryAt, head := n.Plan(w2)
		if !rival {
			require.True(t, tryNow, "no rival: the head tries at once")
			continue
		}
		require.False(t, tryNow, "the head did not defer to its rival")
		require.True(t, head)
		require.False(t, tryAt.Before(before.Add(2*time.Millisecond)) || tryAt.After(time.Now().Add(2*time.Millisecond)),
			"deferred until %v after the release, want one round trip (2ms)", tryAt.Sub(before))
		time.Sleep(time.Until(tryAt))
		tryNow, _, _ = n.Plan(w2)
		require.True(t, tryNow, "the head tries after deferring")
	}
}

func TestRoundTripEstimate(t *testing.T) {
	n, _ := fakeNotifier(t)
	require.Equal(t, 50*time.Microsecond, n.roundTrip(), "the floor, before any attempt")
	n.Observe(time.Millisecond)
	require.Equal(t, time.Millisecond, n.roundTrip())
	n.Observe(65 * time.Millisecond)
	require.Equal(t, 2*time.Millisecond, n.roundTrip(), "a slow attempt moves it 1/64 of the way")
	n.Observe(500 * time.Microsecond)
	require.Equal(t, 500*time.Microsecond, n.roundTrip(), "a fast attempt sets it")
	n.Observe(time.Microsecond)
	require.Equal(t, 50*time.Microsecond, n.roundTrip(), "bounded below")
	n.rtt.Store(int64(time.Second))
	require.Equal(t, 5*time.Millisecond, n.roundTrip(), "bounded above")
}

// TestNewsTellsWatchersOnly: an announcement starting with NewsMark wakes
// watchers, not waiters; everything else on the channel wakes both.
func TestNewsTellsWatchersOnly(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w := joinFake(n, ch, "t1")
	watcher := n.Watch(context.Background(), ch)
	watched := func() bool {
		select {
		case <-watcher.Wake():
			return true
		default:
			return false
		}
	}
	require.False(t, n.Listening(watcher))
	require.Equal(t, followUp(carryOn), n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch}))
	require.True(t, n.Listening(watcher))
	require.True(t, watched() && woken(w))
	n.Lost(w, Attempt{HolderTTL: time.Minute}, time.Now())

	n.mu.Lock()
	events := w.q.events
	n.mu.Unlock()
	n.handle(c, &redis.Message{Channel: ch, Payload: NewsMark + "leader"})
	require.True(t, watched(), "the watcher missed the news")
	require.False(t, woken(w), "news woke a waiter")
	n.mu.Lock()
	require.Equal(t, events, w.q.events, "news counted as an event")
	n.mu.Unlock()

	n.handle(c, &redis.Message{Channel: ch, Payload: "1000 0 elsewhere"})
	require.True(t, watched(), "the watcher missed a handoff")
	n.handle(c, &redis.Message{Channel: "other", Payload: ""})
	require.False(t, watched(), "told of another channel")

	// The key stays while it is watched, and goes idle once unwatched.
	n.Leave(w)
	n.mu.Lock()
	require.False(t, w.q.idle())
	n.mu.Unlock()
	n.Unwatch(watcher)
	n.mu.Lock()
	require.True(t, w.q.idle())
	n.mu.Unlock()
}

// TestSubscriptionChanges: what the dispatcher must do after the server
// drops a subscription, and whom it tells.
func TestSubscriptionChanges(t *testing.T) {
	tests := []struct {
		kind string
		want followUp
	}{
		{"unsubscribe", resubscribe},
		{"sunsubscribe", replaceConn},
	}
	for _, tc := range tests {
		n, c := fakeNotifier(t)
		const ch = "c"
		w1, w2 := joinFake(n, ch, "t1"), joinFake(n, ch, "t2")
		n.handle(c, &redis.Subscription{Kind: "ssubscribe", Channel: ch})
		require.True(t, woken(w1))
		n.Lost(w1, Attempt{HolderTTL: time.Minute}, time.Now())

		got := n.handle(c, &redis.Subscription{Kind: tc.kind, Channel: ch})
		require.Equal(t, tc.want, got, tc.kind)
		require.True(t, woken(w1), "%s: the head was not told to poll", tc.kind)
		require.False(t, woken(w2), "%s: a waiter behind the head was told", tc.kind)
		n.mu.Lock()
		subscribed, events := w1.q.subscribed, w1.q.events
		n.mu.Unlock()
		require.False(t, subscribed, tc.kind)

		// Subscribed again: the head tries once, at once, for releases
		// missed meanwhile; a repeated confirmation changes nothing.
		n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
		n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
		require.True(t, woken(w1))
		n.mu.Lock()
		require.Equal(t, events+1, w1.q.events, tc.kind)
		n.mu.Unlock()
		require.Equal(t, followUp(carryOn), n.handle(c, &redis.Subscription{Kind: tc.kind, Channel: "unknown"}))
	}
}

// TestDownTellsHeadAndWatchers: a connection that failed marks its keys
// unsubscribed and tells their heads and watchers to poll.
func TestDownTellsHeadAndWatchers(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w1, w2 := joinFake(n, ch, "t1"), joinFake(n, ch, "t2")
	watcher := n.Watch(context.Background(), ch)
	n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
	woken(w1)
	<-watcher.Wake()
	n.down(c)
	require.False(t, n.Listening(watcher))
	require.True(t, woken(w1))
	require.False(t, woken(w2))
	select {
	case <-watcher.Wake():
	default:
		t.Fatal("the watcher was not told")
	}
	n.mu.Lock()
	require.False(t, c.up)
	n.mu.Unlock()
	n.Unwatch(watcher)
}

// TestCloseWakesEveryoneAndWaits: Close wakes every waiter and watcher,
// refuses new goroutines, and waits for those it started.
func TestCloseWakesEveryoneAndWaits(t *testing.T) {
	n, _ := fakeNotifier(t)
	w1, w2 := joinFake(n, "a", "t1"), joinFake(n, "b", "t2")
	woken(w1)
	woken(w2)
	watcher := n.Watch(context.Background(), "c")
	returned := make(chan struct{})
	require.True(t, n.Spawn(func() {
		<-n.Context().Done()
		time.Sleep(10 * time.Millisecond)
		close(returned)
	}))
	n.Close()
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the spawned goroutine")
	}
	require.True(t, n.IsClosed())
	require.True(t, woken(w1) && woken(w2))
	select {
	case <-watcher.Wake():
	default:
		t.Fatal("the watcher was not told")
	}
	require.False(t, n.Spawn(func() { t.Error("ran after Close") }))
	n.Close() // again
}

// TestConnEvents: the changes of a connection's state that its
// dispatcher reports, and what it keeps quiet.
func TestConnEvents(t *testing.T) {
	var got []ConnEvent
	n := New(nil, nil, func(e ConnEvent) { got = append(got, e) })
	failure := errors.New("broken")
	ev := connEvents{n: n, node: "n1"}
	ev.dialed()
	ev.heard()
	ev.heard()
	ev.failed(failure)
	ev.failed(failure)
	ev.replaced(failure)
	ev.failed(failure)
	ev.replaced(errSlotMoved)
	ev.heard()
	n.Close()
	ev.failed(failure) // closing breaks connections: no failure
	ev.report(ConnClosed, nil)
	want := []ConnEvent{
		{Node: "n1", State: ConnUp, Attempts: 1},
		{Node: "n1", State: ConnDown, Err: failure},
		{Node: "n1", State: ConnReplaced, Attempts: 1, Err: failure},
		{Node: "n1", State: ConnReplaced, Attempts: 2, Err: errSlotMoved},
		{Node: "n1", State: ConnUp, Attempts: 2},
		{Node: "n1", State: ConnClosed},
	}
	require.Equal(t, want, got)

	// Without onConn, nothing is reported.
	quiet := connEvents{n: New(nil, nil, nil)}
	quiet.dialed()
	quiet.heard()
	quiet.report(ConnClosed, nil)
}
