package notify

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The FIFO of a key's waiters, driven by fake events: a notifier whose
// only connection is a stand-in that is never dialed (it has no pub/sub
// connection, so join sends nothing and starts nothing), and items fed to
// handle as the dispatcher would.

// fakeNotifier returns a notifier with a stand-in connection, and the
// connection.
func fakeNotifier(t *testing.T) (*Notifier, *subConn) {
	t.Helper()
	n := New(nil, nil, nil)
	c := &subConn{keys: map[string]*keyQueue{}}
	n.conns[""] = c
	return n, c
}

// woken reports whether w was signalled, consuming the signal.
func woken(w *Waiter) bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}

func joinFake(n *Notifier, ch, token string) *Waiter {
	return n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, token, false, false, time.Time{})
}

func TestQueueWakesOnlyTheHead(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w1, w2, w3 := joinFake(n, ch, "t1"), joinFake(n, ch, "t2"), joinFake(n, ch, "t3")
	require.Equal(t, []*Waiter{w1, w2, w3}, w1.q.waiters, "arrival order")
	require.True(t, n.Ticket(ch).Queued, "a later caller queues behind them")

	// The subscription's confirmation: only the head is told to try.
	n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
	require.True(t, woken(w1))
	require.False(t, woken(w2) || woken(w3), "the others were woken")
	tryNow, _, _ := n.Plan(w1)
	require.True(t, tryNow, "the woken head tries")
	for _, w := range []*Waiter{w2, w3} {
		tryNow, _, head := n.Plan(w)
		require.False(t, tryNow || head, "a waiter behind the head tries")
	}

	// An announcement while the head tries is kept for it.
	n.handle(c, &redis.Message{Channel: ch, Payload: ""})
	require.False(t, woken(w2) || woken(w3))
	n.Lost(w1, Attempt{HolderTTL: time.Minute}, time.Now())
	require.True(t, woken(w1), "the release announced while the head tried makes it try again")
	n.Lost(w1, Attempt{HolderTTL: time.Minute}, time.Now())
	tryNow, tryAt, head := n.Plan(w1)
	require.False(t, tryNow)
	require.True(t, head)
	require.WithinDuration(t, time.Now().Add(time.Minute), tryAt, time.Second, "the head sleeps until the holder's TTL runs out")

	// The head gives up: the next in line becomes the head.
	n.Leave(w1)
	require.True(t, woken(w2), "the new head is told")
	require.False(t, woken(w3))
	require.Equal(t, []*Waiter{w2, w3}, w2.q.waiters)
}

func TestQueueHandoffGoesToItsWaiter(t *testing.T) {
	n, c := fakeNotifier(t)
	const ch = "c"
	w1, w2 := joinFake(n, ch, "t1"), joinFake(n, ch, "t2")
	n.handle(c, &redis.Subscription{Kind: "subscribe", Channel: ch})
	woken(w1)
	n.Lost(w1, Attempt{HolderTTL: -1}, time.Now()) // its attempt failed

	// A release hands the lock to w2 (queued in Redis by an attempt).
	n.handle(c, &redis.Message{Channel: ch, Payload: "10000 7 t2"})
	require.True(t, woken(w2))
	h, _ := n.TakeHandoff(w2)
	require.NotNil(t, h)
	require.Equal(t, Handoff{Token: "t2", TTL: 10 * time.Second, Fence: 7}, *h)
	h, _ = n.TakeHandoff(w1)
	require.Nil(t, h, "the handoff went to another waiter too")

	// A handoff to another Locker's waiter: nobody here gets it, and the
	// head sleeps until that holder's TTL runs out.
	n.handle(c, &redis.Message{Channel: ch, Payload: "5000 0 someone-else"})
	h, _ = n.TakeHandoff(w1)
	require.Nil(t, h)
	require.False(t, woken(w1), "a handoff to someone else woke the head")
	_, tryAt, _ := n.Plan(w1)
	require.WithinDuration(t, time.Now().Add(5*time.Second), tryAt, time.Second)
}

func TestQueueMissedHandoffIsTried(t *testing.T) {
	n, _ := fakeNotifier(t)
	const ch = "c"
	w1, w2 := joinFake(n, ch, "t1"), joinFake(n, ch, "t2")
	// w1's attempt finds that the lock holds w2's token: it was handed to
	// w2 while the subscription was down. w2 is told to try.
	n.Lost(w1, Attempt{HolderTTL: time.Minute, Holder: "t2"}, time.Now())
	require.True(t, woken(w2))
	tryNow, _, _ := n.Plan(w2)
	require.True(t, tryNow, "the waiter the lock was handed to tries, though not the head")
}

// TestQueueWriterGoesAheadOfReaders: a writer whose attempt left an intent
// in Redis joins ahead of the readers already in its Locker's queue (they
// cannot enter past the intent), but not ahead of another such writer; the
// head it replaces is told to look again.
func TestQueueWriterGoesAheadOfReaders(t *testing.T) {
	n, _ := fakeNotifier(t)
	const ch = "c"
	r1, r2 := joinFake(n, ch, "r1"), joinFake(n, ch, "r2")
	woken(r1)
	w1 := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "w1", true, false, time.Now())
	require.Equal(t, []*Waiter{w1, r1, r2}, w1.q.waiters)
	require.True(t, woken(r1), "the old head was not told")
	_, tryAt, head := n.Plan(w1)
	require.True(t, head)
	require.False(t, tryAt.IsZero(), "the writer renews its intent")
	_, _, head = n.Plan(r1)
	require.False(t, head)

	w2 := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "w2", true, false, time.Now())
	require.Equal(t, []*Waiter{w1, w2, r1, r2}, w1.q.waiters, "behind the writer, ahead of the readers")

	// Readers, and a writer that joined without an attempt (it left no
	// intent), stay where they arrived.
	r3 := joinFake(n, ch, "r3")
	w3 := n.Join(context.Background(), ch, Ticket{}, Attempt{HolderTTL: -1}, "w3", true, false, time.Time{})
	require.Equal(t, []*Waiter{w1, w2, r1, r2, r3, w3}, w1.q.waiters)
}
