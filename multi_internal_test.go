package locksmith

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// freshSet returns a client and a Locker on a real server, and a set of
// the keys named names, under a new hash tag.
func freshSet(t *testing.T, names ...string) (*redis.Client, *Locker, *lockSet) {
	srv := redistest.Shared(t)
	c := redis.NewClient(srv.Options())
	t.Cleanup(func() { c.Close() })
	l := New(c)
	t.Cleanup(func() { l.Close() })
	tag := uuid.NewString()
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = "{" + tag + "}:" + n
	}
	cfg := l.cfg
	return c, l, newLockSet(keys, &cfg)
}

// takenSet returns a Locker on a real server, a set of two keys both held
// by another token, and the request of the set's queued attempts.
func takenSet(t *testing.T) (*redis.Client, *Locker, *lockSet, setReq) {
	c, l, set := freshSet(t, "a", "b")
	cfg := l.cfg
	for _, k := range set.lockKeys {
		if err := c.Set(t.Context(), k.(string), "another", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	token := setToken(2)
	return c, l, set, setReq{token: token, ttlMS: cfg.ttlMS, fenceTTLMS: cfg.fenceTTLMS, mode: setQueues,
		entry: queueEntry(cfg.ttlMS.(int64), false, token)}
}

// TestSetResendKeepsArrival: the first queued attempt of a set, sent again
// after its reply was lost (as a client resends a command on a new
// connection), finds the set's entries already queued and keeps their
// arrival rather than taking the server's time again; and when one of
// those entries is gone by then (a key handed to the set expired and was
// taken), it is a lapsed attempt that writes nothing, so the set starts
// over: a set never has entries of two arrivals, which could order two
// sets differently in two queues and deadlock them.
func TestSetResendKeepsArrival(t *testing.T) {
	ctx := t.Context()
	c, l, set, req := takenSet(t)
	arrivals := func() []float64 {
		t.Helper()
		var got []float64
		for _, q := range set.queues {
			s, err := c.ZScore(ctx, q.(string), "a:"+req.entry).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		return got
	}

	first, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || first.ok || first.lapsed || first.arrival == 0 {
		t.Fatalf("first queued attempt: %+v, %v; want refused, queued with an arrival", first, err)
	}
	// The server's clock moves past the first arrival.
	for {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.UnixMilli() > first.arrival {
			break
		}
	}
	resent, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || resent.lapsed || resent.arrival != first.arrival {
		t.Fatalf("resent: %+v, %v; want the arrival %d kept", resent, err, first.arrival)
	}
	if got := arrivals(); len(got) != 2 || got[0] != float64(first.arrival) || got[1] != float64(first.arrival) {
		t.Fatalf("arrivals in the queues %v, want %d in both", got, first.arrival)
	}

	if err := c.ZRem(ctx, set.queues[1].(string), "a:"+req.entry, "l:"+req.entry).Err(); err != nil {
		t.Fatal(err)
	}
	gone, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || !gone.lapsed {
		t.Fatalf("resent with an entry gone: %+v, %v; want lapsed", gone, err)
	}
	if got := arrivals(); len(got) != 1 {
		t.Fatalf("arrivals in the queues %v: a lapsed attempt queued the set again", got)
	}
}

// TestSetLateResendStartsOver: the first queued attempt of a set, resent
// so late that the entries its first delivery queued have lapsed and been
// dropped, while a key was handed to the set meanwhile, is a lapsed
// attempt that writes nothing: the set starts over (withdrawing, which
// hands that key on) rather than queue again with a new arrival while it
// holds the key, which let two sets each hold a key the other waited for
// (found by model/multi.pml, BUG_RESEND_HELD_KEPT).
func TestSetLateResendStartsOver(t *testing.T) {
	ctx := t.Context()
	c, l, set, req := takenSet(t)
	token := req.token.(string)
	first, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || first.ok || first.lapsed {
		t.Fatalf("first queued attempt: %+v, %v; want refused, queued", first, err)
	}
	// Key b is handed to the set (its entry there goes), and the set's
	// entry on a lapses and is dropped by a release of a.
	if err := c.Set(ctx, set.lockKeys[1].(string), token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, q := range set.queues {
		if err := c.ZRem(ctx, q.(string), "a:"+req.entry, "l:"+req.entry).Err(); err != nil {
			t.Fatal(err)
		}
	}

	late, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || !late.lapsed {
		t.Fatalf("the late resend: %+v, %v; want lapsed", late, err)
	}
	if n, err := c.ZCard(ctx, set.queues[0].(string)).Result(); err != nil || n != 0 {
		t.Fatalf("the queue of a holds %d members (%v): the late resend queued the set again", n, err)
	}
}

// TestSetTryOnceScript: the attempt of a set that does not wait (no
// queues, no fences) on a real server: refused at a key held by another
// token, it deletes the keys it created and leaves the holder's key and
// a key already holding its token as they were; won, every key holds the
// token with the TTL again, and a key that held the token already (a
// resend of an attempt whose reply was lost) counts as handed.
func TestSetTryOnceScript(t *testing.T) {
	ctx := t.Context()
	c, l, set := freshSet(t, "a", "b", "c")
	cfg := l.cfg
	a, b, k3 := set.lockKeys[0].(string), set.lockKeys[1].(string), set.lockKeys[2].(string)
	token := setToken(3)
	req := setReq{token: token, ttlMS: int64(60000), fenceTTLMS: cfg.fenceTTLMS, mode: setUnqueued}
	ttlOf := func(k string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	requireValue := func(k, want string) {
		t.Helper()
		got, err := c.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			got = "(absent)"
		} else if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s = %q, want %q", k, got, want)
		}
	}

	// a holds the token already with a short TTL, k3 is held by another.
	if err := c.Set(ctx, a, token, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, k3, "another", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.extras.acquireSet(ctx, set, req)
	if err != nil || res.ok || res.held != 2 || res.holderTTL <= 20*time.Second {
		t.Fatalf("refused attempt: %+v, %v; want refused at key 2 with its holder's TTL", res, err)
	}
	requireValue(a, token)
	requireValue(b, "(absent)")
	requireValue(k3, "another")
	if d := ttlOf(a); d > 5*time.Second {
		t.Fatalf("a refused attempt renewed a key it held: TTL %v", d)
	}

	// k3 is free now: the attempt wins, a counts as handed, every TTL is set.
	if err := c.Del(ctx, k3).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = l.extras.acquireSet(ctx, set, req)
	if err != nil || !res.ok || !res.handed || len(res.fences) != 3 {
		t.Fatalf("won attempt: %+v, %v; want won, one key handed", res, err)
	}
	for _, k := range []string{a, b, k3} {
		requireValue(k, token)
		if d := ttlOf(k); d <= 50*time.Second {
			t.Fatalf("%s: TTL %v after the win, want the set's 60s", k, d)
		}
	}
}
