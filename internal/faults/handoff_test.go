//go:build linux

package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
func TestLateHandoffAnnouncement(t *testing.T) {
	srv := redistest.New(t)
	cases := []struct {
		name string
		// refreshDelay delays the reply to W's refresh.
		refreshDelay time.Duration
	}{
		{name: "fence", refreshDelay: 0},
		{name: "deadline", refreshDelay: 1200 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The scenario races W's next attempt against X for the
			// lock that expired unused; when W wins it, the late
			// announcement is never heard: set it up again, a few times.
			for try := range 3 {
				if lateHandoff(t, srv, fmt.Sprintf("%s-%d", tc.name, try), tc.refreshDelay) {
					return
				}
				t.Logf("try %d: W took the expired lock before X; again", try+1)
			}
			t.Fatal("W took the expired lock before X in every try: the late announcement was never heard")
		})
	}
}

// lateHandoff runs the scenario once on key and reports whether it
// reached the late announcement.
func lateHandoff(t *testing.T, srv *redistest.Server, key string, refreshDelay time.Duration) bool {
	pw := newProxy(t, srv.Addr)
	r := newRun()
	ctx := t.Context()
	const ttlW = time.Second
	// The delays of what comes back to W: d1 for its attempt in flight at
	// the first handoff, which returns after the handed lock expired and X
	// took it (d1 > ttlW); d2 for the first announcement, which arrives
	// after W's next attempt left (d2 > d1) and before it returns (d2 <
	// d1 + d3); d3 for that attempt, which returns before the second
	// handoff expires (d3 < ttlW); d4 for the second announcement, which
	// comes last.
	// Each margin is 200ms or more (it was 100ms between d3 and ttlW, which
	// a loaded machine under -race sometimes used up: W learnt that it held
	// the lock too late to refresh it).
	const d1, d2, d3, d4 = 1200 * time.Millisecond, 1550 * time.Millisecond, 700 * time.Millisecond, 4 * time.Second
	h, w, x := r.tracker("H"), r.tracker("W"), r.tracker("X")
	lh, lx := fencedLocker(t, srv.Addr, 5*time.Second), fencedLocker(t, srv.Addr, 5*time.Second)
	lw := fencedLocker(t, pw.Addr(), ttlW)
	raw := newClient(t, srv.Addr)
	keys, err := lh.Keys(key)
	require.NoError(t, err)
	queued := func() bool {
		st, err := lh.Inspect(ctx, key)
		require.NoError(t, err)
		return st.Queued == 1
	}
	held := func(n int) func() bool { return func() bool { return pw.Held(faults.ToClient) >= n } }

	// Load the scripts first, so that each of W's calls is one round trip.
	warm, err := lh.Obtain(ctx, key+"-warm-up")
	require.NoError(t, err)
	require.NoError(t, warm.Refresh(ctx, time.Second))
	require.NoError(t, warm.Release(ctx))

	hh, err := h.obtain(ctx, lh, key)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := obtainAsync(wctx, w, lw, key, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
	require.Eventually(t, queued, 10*time.Second, time.Millisecond, "W never queued")
	// Once W's Locker listens, what comes back to it is the replies to its
	// attempts, until a release announces.
	require.Eventually(t, func() bool { return raw.PubSubNumSub(ctx, keys.Channel).Val()[keys.Channel] == 1 },
		10*time.Second, time.Millisecond, "W's Locker does not listen")

	faultStart := time.Now()
	pw.SetDelay(faults.ToClient, d1)
	require.Eventually(t, held(1), 5*time.Second, time.Millisecond, "no reply to W held back")
	pw.SetDelay(faults.ToClient, d2)
	require.NoError(t, h.release(ctx, hh)) // the first handoff, to W
	require.Eventually(t, held(2), 5*time.Second, time.Millisecond, "the first announcement was not held back")
	pw.SetDelay(faults.ToClient, d3)

	// X gets the lock once the handed one has expired, and writes.
	xctx, cancelX := context.WithTimeout(ctx, 10*time.Second)
	defer cancelX()
	hx, err := x.obtain(xctx, lx, key, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
	require.NoError(t, err)
	ok, _ := hx.write(r.store)
	require.True(t, ok)
	// W's next attempt queues it again behind X.
	if !eventuallyOr(queued, got, 5*time.Second) {
		select {
		case res := <-got:
			// W's attempt took the lock that expired unused, before X
			// did: W holds it, or, its reply held back past the lock's
			// validity, gave it up with ErrLockLost.
			pw.Heal()
			if res.err == nil {
				// Its reply came back late: the lock may have
				// expired since.
				res.h.end(time.Now(), "released")
				if err := w.release(ctx, res.h); err != nil {
					require.ErrorIs(t, err, locksmith.ErrNotHeld)
				}
			} else {
				require.ErrorIs(t, res.err, locksmith.ErrLockLost, "W's Obtain returned before it queued again")
			}
			require.NoError(t, x.release(ctx, hx))
			return false
		default:
			t.Fatal("W did not queue again")
		}
	}
	pw.SetDelay(faults.ToClient, d4)
	require.NoError(t, x.release(ctx, hx)) // the second handoff, to W
	require.Eventually(t, held(3), 5*time.Second, time.Millisecond, "the second announcement was not held back")
	pw.SetDelay(faults.ToClient, refreshDelay)

	res := receive(t, got, 10*time.Second)
	pw.Heal()
	r.faultSpan("delay", faultStart, time.Now(), false)
	if refreshDelay > 0 {
		t.Logf("W's Obtain returned after %v: %v", time.Since(faultStart), res.err)
		if res.err == nil {
			ahead := res.h.lk.Deadline().Sub(res.h.obtained)
			res.h.end(time.Now(), "stopped")
			_ = w.release(ctx, res.h)
			r.check(t)
			require.Positive(t, ahead, "Obtain returned the lock %v after its Deadline", -ahead)
			return true
		}
		require.ErrorIs(t, res.err, locksmith.ErrLockLost)
		r.check(t)
		return true
	}
	require.NoError(t, res.err)
	hw := res.h
	require.Equal(t, hw.lk.Token(), raw.Get(ctx, key).Val(), "W's lock is not in Redis")
	fence, err := raw.Get(ctx, keys.Fence).Int64()
	require.NoError(t, err)
	t.Logf("W's fence %d, X's %d, the fence counter's %d; W's Deadline %v after its Obtain returned",
		hw.lk.Fence(), hx.lk.Fence(), fence, hw.lk.Deadline().Sub(hw.obtained))
	ok, _ = hw.write(r.store)
	require.NoError(t, w.release(ctx, hw))
	r.check(t)
	require.Greater(t, hw.lk.Fence(), hx.lk.Fence(), "the lock W holds came back with a fence below X's, whose lock came before it")
	require.True(t, ok, "the store refused the holder's write")
	return true
}

// eventuallyOr waits up to d for cond, polling, unless got has a result
// first (left in it for the caller); it reports whether cond held.
func eventuallyOr(cond func() bool, got <-chan obtainResult, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		if len(got) > 0 {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
