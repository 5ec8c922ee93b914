package notify

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// until polls cond under the notifier's lock until it holds, or fails t
// after d.
func until(t *testing.T, n *Notifier, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n.mu.Lock()
		ok := cond()
		n.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCrossedUnsubscribeResubscribes sends, for a key that has a waiter,
// the UNSUBSCRIBE that an idle key's reap sends when a new waiter joined
// just after it looked: the notifier must subscribe the key again, not go
// on believing it listens, and the waiter must be woken by the next
// release.
func TestCrossedUnsubscribeResubscribes(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	n := New(client, nil, nil)
	t.Cleanup(n.Close)

	const ch = "test:crossed"
	w := n.Join(ctx, ch, Ticket{}, Attempt{HolderTTL: -1}, "token", false, false, time.Time{})
	t.Cleanup(func() { n.Leave(w) })
	q := w.q
	until(t, n, 5*time.Second, func() bool { return q.subscribed }, "subscribed")
	n.mu.Lock()
	events, ps := q.events, q.conn.ps
	n.mu.Unlock()

	if err := n.unsubscribe(ps, ch); err != nil {
		t.Fatal(err)
	}
	until(t, n, 5*time.Second, func() bool { return q.subscribed && q.events > events }, "subscribed again after the crossed UNSUBSCRIBE")
	subs, err := client.PubSubNumSub(ctx, ch).Result()
	if err != nil || subs[ch] != 1 {
		t.Fatalf("PUBSUB NUMSUB = %v, %v; want 1 subscriber", subs, err)
	}

	// Heard: a release announcement wakes the head.
	n.mu.Lock()
	q.woken = nil
	n.mu.Unlock()
	for len(w.wake) > 0 {
		<-w.wake
	}
	if err := client.Publish(ctx, ch, "").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.wake:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release announcement")
	}
}
