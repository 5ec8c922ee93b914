//go:build linux

package faults_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A handoff announced late: a release hands the lock to waiter W, whose
// replies (and so the announcement) are delayed; the handed lock expires
// unused and X takes it; W's next attempt queues W again, with the same
// token, and X's release hands the lock to W a second time. W then acts
// on the first announcement, which arrived while that attempt was in
// flight: the handoff is old, so W refreshes the lock, which succeeds,
// since W holds it again.
//
// Obtain must then return the lock with a fence above X's, as for every
// lock acquired before it, so that a store fenced by it accepts W's
// write; and when the refresh is answered after the Deadline it sets, it
// must not return the lock as a success.
//
// The soak found both at once (seed 1796168175927366964, -soak=2m,
// porcupine: Illegal): a waiter's lock came back with the first
// handoff's fence, below those of three holders in between, 165ms after
// its Deadline, and its write was refused while Redis held its lock.
//
// A semaphore's release hands a permit over the same way, and its
// waiters meet the same late announcement: the scenario runs on a
// semaphore of one permit too.
func TestLateHandoffAnnouncement(t *testing.T) {
	srv := redistest.New(t)
	cases := []struct {
		name string
		// lateRefresh holds back the reply to W's refresh until the
		// lock it refreshed has expired in Redis.
		lateRefresh bool
	}{
		{name: "fence"},
		{name: "deadline", lateRefresh: true},
	}
	for _, kind := range []handedKind{lockKind{}, permitKind{}} {
		for _, tc := range cases {
			t.Run(kind.name()+"/"+tc.name, func(t *testing.T) {
				lateHandoff(t, srv, kind, kind.name()+"-"+tc.name, tc.lateRefresh)
			})
		}
	}
}

// A handedKind is a kind of hold that a release hands over: a lock, or a
// permit of a semaphore of one.
type handedKind interface {
	name() string
	// take takes the hold on key with l, recorded by tr.
	take(ctx context.Context, tr *tracker, l *locksmith.Locker, key string, opts ...locksmith.Option) (*holding, error)
	// queued returns how many waiters are queued for key, as l reads it.
	queued(ctx context.Context, l *locksmith.Locker, key string) (int, error)
	// holders returns the tokens that hold key in Redis, as raw reads them.
	holders(ctx context.Context, raw *redis.Client, key string) []string
	// scripts returns the scripts the scenario loads before it starts,
	// beyond those that taking, refreshing and releasing a hold load:
	// the one that confirms a handoff.
	scripts() ([]string, error)
}

type lockKind struct{}

func (lockKind) name() string { return "lock" }
func (lockKind) take(ctx context.Context, tr *tracker, l *locksmith.Locker, key string, opts ...locksmith.Option) (*holding, error) {
	return tr.obtain(ctx, l, key, opts...)
}
func (lockKind) queued(ctx context.Context, l *locksmith.Locker, key string) (int, error) {
	st, err := l.Inspect(ctx, key)
	return st.Queued, err
}
func (lockKind) holders(ctx context.Context, raw *redis.Client, key string) []string {
	return []string{raw.Get(ctx, key).Val()}
}
func (lockKind) scripts() ([]string, error) { return readScripts("lib_fence.lua", "lock_confirm.lua") }

type permitKind struct{}

func (permitKind) name() string { return "permit" }
func (permitKind) take(ctx context.Context, tr *tracker, l *locksmith.Locker, key string, opts ...locksmith.Option) (*holding, error) {
	return tr.acquire(ctx, l.Semaphore(key, 1), opts...)
}
func (permitKind) queued(ctx context.Context, l *locksmith.Locker, key string) (int, error) {
	st, err := l.Semaphore(key, 1).Inspect(ctx)
	return st.Queued, err
}
func (permitKind) holders(ctx context.Context, raw *redis.Client, key string) []string {
	return raw.ZRange(ctx, key, 0, -1).Val()
}
func (permitKind) scripts() ([]string, error) {
	return readScripts("lib_hold.lua", "lib_fence.lua", "permit_confirm.lua")
}

// readScripts returns the text of the library's Lua files (in its
// scripts/), joined into one script: a script's preludes, then its own
// file, in the order of its row in scripts.go.
func readScripts(files ...string) ([]string, error) {
	var src []byte
	for _, f := range files {
		b, err := os.ReadFile("../../scripts/" + f)
		if err != nil {
			return nil, err
		}
		src = append(src, b...)
	}
	return []string{string(src)}, nil
}

// lateHandoff runs the scenario once on key. The proxy in front of W
// holds back each reply and message to W and lets them go in the order
// the scenario needs, once what comes before has been observed, so no
// step depends on how fast a loaded machine runs; the only clock is the
// TTL of the locks handed to W, and each of W's steps is taken at once.
func lateHandoff(t *testing.T, srv *redistest.Server, kind handedKind, key string, lateRefresh bool) {
	pw := newProxy(t, srv.Addr)
	r := newRun()
	ctx := t.Context()
	// Short enough that W's subscriber does not find its connection dead
	// while the first announcement is held (it PINGs after 2s quiet).
	const ttlW = 1500 * time.Millisecond
	h, w, x := r.tracker("H"), r.tracker("W"), r.tracker("X")
	lh, lx := fencedLocker(t, srv.Addr, 5*time.Second), fencedLocker(t, srv.Addr, 5*time.Second)
	lw := fencedLocker(t, pw.Addr(), ttlW)
	raw := newClient(t, srv.Addr)
	keys, err := lh.Keys(key)
	require.NoError(t, err)
	queued := func() bool {
		n, err := kind.queued(ctx, lh, key)
		require.NoError(t, err)
		return n == 1
	}
	// The pieces held back, in order: 1, the reply to W's attempt in
	// flight at the first handoff; 2, the first announcement; 3, the
	// reply to W's next attempt, which queues it behind X; 4, the second
	// announcement; 5, with lateRefresh, the reply to W's refresh.
	heldBack := func(n int) func() bool { return func() bool { return pw.HeldBack(faults.ToClient) == n } }

	// Load the scripts first, so that each of W's calls is one round trip.
	warm, err := kind.take(ctx, newRun().tracker("warm-up"), lh, key+"-warm-up") // not in r's history
	require.NoError(t, err)
	require.NoError(t, warm.lk.Refresh(ctx, time.Second))
	require.NoError(t, warm.lk.Release(ctx))
	// And the one that confirms a handoff heard late, which W runs last.
	scripts, err := kind.scripts()
	require.NoError(t, err)
	for _, src := range scripts {
		require.NoError(t, raw.ScriptLoad(ctx, src).Err())
	}

	hh, err := kind.take(ctx, h, lh, key)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := make(chan obtainResult, 1)
	go func() {
		h, err := kind.take(wctx, w, lw, key, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
		got <- obtainResult{h, err}
	}()
	require.Eventually(t, queued, 10*time.Second, time.Millisecond, "W never queued")
	// Once W's Locker listens, what comes back to it is the replies to its
	// attempts, until a release announces.
	require.Eventually(t, func() bool { return raw.PubSubNumSub(ctx, keys.Channel).Val()[keys.Channel] == 1 },
		10*time.Second, time.Millisecond, "W's Locker does not listen")

	faultStart := time.Now()
	// Not the replies to the PINGs of W's subscriber: they come when its
	// connection has been quiet for a while. Nor the confirmation of its
	// subscription: the server counts the subscriber before the proxy has
	// passed the confirmation on, and on a loaded machine it can still be
	// on its way here (it was held as piece 1, and every step after
	// waited for the wrong piece).
	pw.Hold(faults.ToClient, func(piece []byte) bool {
		return !bytes.Contains(piece, []byte("$4\r\npong\r\n")) && !bytes.Contains(piece, []byte("subscribe\r\n"))
	})
	require.Eventually(t, heldBack(1), 5*time.Second, time.Millisecond, "no reply to W held back")
	require.NoError(t, h.release(ctx, hh)) // the first handoff, to W
	require.Eventually(t, heldBack(2), 5*time.Second, time.Millisecond, "the first announcement was not held back")

	// X gets the lock once the handed one has expired unused, and writes.
	xctx, cancelX := context.WithTimeout(ctx, 10*time.Second)
	defer cancelX()
	hx, err := kind.take(xctx, x, lx, key, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
	require.NoError(t, err)
	ok, _ := hx.write(r.store)
	require.True(t, ok)
	// W learns that its attempt did not take the lock, and its next
	// attempt queues it again behind X.
	pw.Release(faults.ToClient, 1)
	require.Eventually(t, queued, 5*time.Second, time.Millisecond, "W did not queue again")
	require.Eventually(t, heldBack(3), 5*time.Second, time.Millisecond, "the reply to W's next attempt was not held back")
	require.NoError(t, x.release(ctx, hx)) // the second handoff, to W
	require.Eventually(t, heldBack(4), 5*time.Second, time.Millisecond, "the second announcement was not held back")
	if !lateRefresh {
		pw.Hold(faults.ToClient, nil)
	}
	// The first announcement arrives while W's attempt is in flight,
	// then that attempt's reply; the second announcement stays held.
	pw.Release(faults.ToClient, 2)
	require.Eventually(t, func() bool { return pw.Held(faults.ToClient) == 2 }, 5*time.Second, time.Millisecond,
		"the first announcement was not delivered")
	pw.Release(faults.ToClient, 3)
	if lateRefresh {
		require.Eventually(t, heldBack(5), 5*time.Second, time.Millisecond, "W did not refresh")
		// Its reply comes back once the lock it refreshed has expired
		// in Redis, after the Deadline it set.
		require.Eventually(t, func() bool { return raw.Exists(ctx, key).Val() == 0 }, ttlW+5*time.Second, time.Millisecond,
			"the lock W refreshed did not expire")
		pw.Hold(faults.ToClient, nil)
		pw.Release(faults.ToClient, 5)
	}

	res := receive(t, got, 10*time.Second)
	pw.Heal()
	r.faultSpan("hold", faultStart, time.Now(), false)
	if lateRefresh {
		t.Logf("W's Obtain returned after %v: %v", time.Since(faultStart), res.err)
		if res.err == nil {
			ahead := res.h.lk.Deadline().Sub(res.h.obtained)
			res.h.end(time.Now(), "stopped")
			_ = w.release(ctx, res.h)
			r.check(t)
			require.Positive(t, ahead, "Obtain returned the lock %v after its Deadline", -ahead)
			return
		}
		require.ErrorIs(t, res.err, locksmith.ErrLockLost)
		r.check(t)
		return
	}
	require.NoError(t, res.err)
	hw := res.h
	require.Equal(t, []string{hw.lk.Token()}, kind.holders(ctx, raw, key), "W's lock is not in Redis")
	fence, err := raw.Get(ctx, keys.Fence).Int64()
	require.NoError(t, err)
	t.Logf("W's fence %d, X's %d, the fence counter's %d; W's Deadline %v after its Obtain returned",
		hw.lk.Fence(), hx.lk.Fence(), fence, hw.lk.Deadline().Sub(hw.obtained))
	ok, _ = hw.write(r.store)
	require.NoError(t, w.release(ctx, hw))
	r.check(t)
	require.Greater(t, hw.lk.Fence(), hx.lk.Fence(), "the lock W holds came back with a fence below X's, whose lock came before it")
	require.True(t, ok, "the store refused the holder's write")
}
