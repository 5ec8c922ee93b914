//go:build linux

package faults_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The fault scenarios of semaphores. Their holders are up to the limit at
// once, so they do not share one fenced register as a lock's holders do:
// each claims a job, a record of the store that keeps the fence of the
// permit that wrote it last, and a holder that takes over a job whose
// holder lost its permit writes to it with its own, higher, fence.

// job names the job record number i of semaphore key.
func job(key string, i int) string { return key + "/job-" + strconv.Itoa(i) }

// awaitWaiting waits until a Locker listens for s's releases, as one does
// while an Acquire of it waits.
func awaitWaiting(t *testing.T, s *locksmith.Semaphore) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := s.Inspect(t.Context())
		return err == nil && st.Listening > 0
	}, 10*time.Second, 5*time.Millisecond, "no Acquire waits for %q", s.Key())
}

// holderTokens returns the tokens of the permits of s that Redis holds.
func holderTokens(t *testing.T, s *locksmith.Semaphore) []string {
	t.Helper()
	st, err := s.Inspect(t.Context())
	require.NoError(t, err)
	tokens := make([]string, len(st.Holders))
	for i, h := range st.Holders {
		tokens[i] = h.Token
	}
	return tokens
}

// refused checks that a try-once Acquire of s finds every permit held,
// and records it.
func refused(t *testing.T, tr *tracker, s *locksmith.Semaphore) {
	t.Helper()
	h, err := tr.acquire(t.Context(), s)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a permit was free")
	require.Nil(t, h)
}

// A holder process of one of three permits killed without releasing: its
// permit comes back within its TTL and the waiter's retry delay, and goes
// to the waiter, while the other two holders keep theirs; then the
// semaphore is full again.
func TestSemaphoreKilledHolderPermitComesBack(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, limit, ttl, retry = "sem-killed", 3, time.Second, 50 * time.Millisecond
	var helpers []*helperProc
	var fences []int64
	var tokens []string
	for _, name := range []string{"process-1", "process-2"} {
		p := startHelper(t, r, helperConfig{Mode: modeHold, Redis: srv.Addr, Name: name, Key: key, Limit: limit, TTL: ttl})
		ready := p.await("ready", 10*time.Second)
		fence, err := strconv.ParseInt(ready.Detail, 10, 64)
		require.NoError(t, err)
		helpers, fences, tokens = append(helpers, p), append(fences, fence), append(tokens, ready.Token)
	}
	c, w, x := r.tracker("C"), r.tracker("waiter"), r.tracker("X")
	lc, lw := fencedLocker(t, srv.Addr, ttl), fencedLocker(t, srv.Addr, ttl)
	sem := lw.Semaphore(key, limit)
	hc, err := c.acquire(ctx, lc.Semaphore(key, limit))
	require.NoError(t, err)
	hc.lease(ctx)
	refused(t, x, sem)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan obtainResult, 1)
	go func() {
		h, err := w.acquire(wctx, sem, locksmith.WithRetry(locksmith.LinearBackoff(retry)))
		got <- obtainResult{h, err}
	}()
	awaitWaiting(t, sem)

	killed := helpers[0].kill(r, fences[0])
	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	res.h.lease(ctx)
	took := res.h.obtained.Sub(killed)
	bound := ttl + defaultDrift(ttl) + retry
	t.Logf("the waiter obtained the killed holder's permit %v after the kill; bound %v (+%v slack)", took, bound, slack)
	require.Less(t, took, bound+slack)
	require.Greater(t, res.h.lk.Fence(), max(fences[0], fences[1], hc.lk.Fence()))
	require.ElementsMatch(t, []string{tokens[1], hc.lk.Token(), res.h.lk.Token()}, holderTokens(t, sem),
		"the permits held: the other two holders', and the waiter's")
	refused(t, x, sem)

	helpers[1].stop()
	require.NoError(t, helpers[1].wait(5*time.Second))
	require.NoError(t, c.release(ctx, hc))
	require.NoError(t, w.release(ctx, res.h))
	rep := r.check(t)
	require.Equal(t, limit, rep.Peak[key], "the most holders at once")
}

// A holder process stopped (SIGSTOP) past its TTL, while another holder
// keeps the second of two permits: a waiter gets the stopped holder's
// permit only after its Deadline (else three would believe at once) and
// takes over its job; the resumed process, writing on with its old fence
// and paying no heed to its lease, has every write to the job refused.
// The other holder's lease and job are untouched.
func TestSemaphorePausedHolderLosesItsJob(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	const key, limit, ttl = "sem-paused", 2, 500 * time.Millisecond
	stoppedJob, otherJob := job(key, 1), job(key, 2)
	helper := startHelper(t, r, helperConfig{Mode: modeWriter, Redis: srv.Addr, Store: ss.Addr(),
		Name: "process", Key: key, Limit: limit, Record: stoppedJob, TTL: ttl, After: 5})
	helper.await("ready", 10*time.Second)

	c, b := r.tracker("C"), r.tracker("B")
	hc, err := c.acquire(ctx, fencedLocker(t, srv.Addr, ttl).Semaphore(key, limit))
	require.NoError(t, err)
	lease := hc.lease(ctx)
	ok, _ := hc.writeRecord(r.store, otherJob)
	require.True(t, ok)
	// The process writes under its permit until the store has seen it a
	// few times.
	require.Eventually(t, func() bool { return count(r, "process", faults.OutcomeAccepted) >= 3 },
		10*time.Second, time.Millisecond)

	stopped := time.Now()
	helper.signal(syscall.SIGSTOP)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hb, err := b.acquire(wctx, fencedLocker(t, srv.Addr, 5*time.Second).Semaphore(key, limit),
		locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
	require.NoError(t, err)
	ok, _ = hb.writeRecord(r.store, stoppedJob)
	require.True(t, ok, "the new holder could not take over the job")
	time.Sleep(ttl) // well past its TTL
	helper.signal(syscall.SIGCONT)
	r.faultSpan("sigstop-holder", stopped, time.Now(), false)
	require.NoError(t, helper.wait(15*time.Second))

	require.NoError(t, lease.Err(), "the other holder lost its permit")
	ok, _ = hc.writeRecord(r.store, otherJob)
	require.True(t, ok)
	require.NoError(t, b.release(ctx, hb))
	require.NoError(t, c.release(ctx, hc))

	rep := r.check(t)
	window := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "process" })
	claimed := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindWrite && op.Holder == "B" })
	var before, after, acceptedAfter int
	for _, op := range r.hist.Ops() {
		if op.Kind != faults.KindWrite || op.Holder != "process" {
			continue
		}
		if op.Call < claimed.Call {
			before++
			continue
		}
		after++
		if op.Outcome == faults.OutcomeAccepted {
			acceptedAfter++
		}
	}
	t.Logf("the stopped process's window ended by %s %v before the new holder's began; it wrote %d times before the takeover and %d after, %d stale writes rejected; most holders at once %d of %d",
		window.Outcome, time.Duration(hb.tr.clock.At(hb.obtained)-window.Return), before, after, rep.StaleRejected, rep.Peak[key], limit)
	require.Equal(t, "deadline", window.Outcome, "the stopped process's window ends at its Deadline")
	require.Positive(t, before)
	require.Positive(t, after, "the resumed process made no write")
	require.Zero(t, acceptedAfter, "stale writes accepted")
	require.Zero(t, rep.StaleAccepted)
	require.Positive(t, rep.StaleRejected)
	require.Equal(t, limit, rep.Peak[key])
}

// count counts the writes by holder with outcome recorded in r so far.
func count(r *run, holder, outcome string) int {
	n := 0
	for _, op := range r.hist.Ops() {
		if op.Kind == faults.KindWrite && op.Holder == holder && op.Outcome == outcome {
			n++
		}
	}
	return n
}

// Redis restarted empty while both permits of a semaphore are held: two
// new holders get them at once while the old ones still believe (four at
// once, which a server without persistence cannot prevent, and the
// checker excuses), fences keep increasing, the taken-over job refuses
// its old holder's write, a fifth caller is refused (the count is right
// again), and the old holders' leases end with ErrLockLost within a
// renewal interval plus go-redis's reconnection.
func TestSemaphoreRedisRestartedEmpty(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, limit, ttl, renew = "sem-restart", 2, 5 * time.Second, 300 * time.Millisecond
	olds := []*tracker{r.tracker("A"), r.tracker("C")}
	var held []*holding
	var leases []context.Context
	for i, tr := range olds {
		h, err := tr.acquire(ctx, fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew)).Semaphore(key, limit))
		require.NoError(t, err)
		leases = append(leases, h.lease(ctx))
		ok, _ := h.writeRecord(r.store, job(key, i))
		require.True(t, ok)
		held = append(held, h)
	}

	start := time.Now()
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	r.faultSpan("redis-restart", start, restarted, true)

	sem := fencedLocker(t, srv.Addr, ttl).Semaphore(key, limit)
	var news []*holding
	for _, name := range []string{"B", "D"} {
		h, err := r.tracker(name).acquire(ctx, sem)
		require.NoError(t, err, "the restarted server still counts the old permits")
		require.Greater(t, h.lk.Fence(), max(held[0].lk.Fence(), held[1].lk.Fence()), "fences must keep increasing across a restart")
		news = append(news, h)
	}
	refused(t, r.tracker("E"), sem)
	ok, _ := news[0].writeRecord(r.store, job(key, 0))
	require.True(t, ok)
	believed := leases[0].Err() == nil
	ok, _ = held[0].writeRecord(r.store, job(key, 0))
	require.False(t, ok, "the job accepted its old holder's write after the new holder's")
	t.Logf("the old holder's lease was still alive at its refused write: %v", believed)

	for i, lease := range leases {
		require.True(t, waitDone(lease, renew+time.Second+slack), "a lease did not end")
		at, cause := held[i].leaseEnd()
		require.ErrorIs(t, cause, locksmith.ErrLockLost)
		t.Logf("%s's lease ended %v after the restart (renewal interval %v)", olds[i].name, at.Sub(restarted), renew)
		require.Less(t, at.Sub(restarted), renew+time.Second, "later than a renewal interval plus go-redis's reconnection")
		require.ErrorIs(t, olds[i].release(ctx, held[i]), locksmith.ErrNotHeld)
	}
	require.ElementsMatch(t, []string{news[0].lk.Token(), news[1].lk.Token()}, holderTokens(t, sem),
		"the old holders' renewals brought back a permit")
	for _, h := range news {
		require.NoError(t, h.tr.release(ctx, h))
	}
	rep := r.check(t)
	t.Logf("windows over the limit across the restart (excused): %d; most holders at once otherwise %d of %d",
		rep.ExcusedOverlaps, rep.Peak[key], limit)
	require.Positive(t, rep.ExcusedOverlaps)
	require.Equal(t, 1, rep.ExcusedRejections, "the old holder's refused write, inside its window")
}

// A holder of one of two permits cut off by a partition (a blackholing
// proxy) stops believing at its Deadline, before the server lets its
// permit expire; only then does a waiter get a permit, the other holder
// keeping its own all along. The cut-off holder's renewals, delivered
// after the partition heals, bring nothing back.
func TestSemaphoreBlackholedHolderStopsBeforeExpiry(t *testing.T) {
	srv := redistest.New(t)
	p := newProxy(t, srv.Addr)
	r := newRun()
	ctx := t.Context()
	const key, limit, ttl, renew = "sem-blackhole", 2, time.Second, 200 * time.Millisecond
	a, b, c := r.tracker("A"), r.tracker("B"), r.tracker("C")
	semA := fencedLocker(t, p.Addr(), ttl, locksmith.WithRenewInterval(renew)).Semaphore(key, limit)
	semB := fencedLocker(t, srv.Addr, ttl).Semaphore(key, limit)
	raw := newClient(t, srv.Addr)

	hc, err := c.acquire(ctx, fencedLocker(t, srv.Addr, ttl).Semaphore(key, limit))
	require.NoError(t, err)
	leaseC := hc.lease(ctx)
	ha, err := a.acquire(ctx, semA)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	first := ha.lk.Deadline()
	require.Eventually(t, func() bool { return ha.lk.Deadline().After(first) }, 5*time.Second, time.Millisecond,
		"the permit was never renewed")
	ok, _ := ha.writeRecord(r.store, job(key, 1))
	require.True(t, ok)

	cut := time.Now()
	p.Blackhole(true)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan obtainResult, 1)
	go func() {
		h, err := b.acquire(wctx, semB, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
		got <- obtainResult{h, err}
	}()
	// When the server will expire A's permit (its score, in ms of the
	// server's clock, which is this machine's wall clock), read until
	// A's lease ends: a renewal already past the proxy may still land
	// just after the cut.
	var expiresAt float64
	for lease.Err() == nil {
		if score, err := raw.ZScore(ctx, key, ha.lk.Token()).Result(); err == nil {
			expiresAt = score
		} else {
			require.ErrorIs(t, err, redis.Nil)
		}
		time.Sleep(time.Millisecond)
	}
	require.Positive(t, expiresAt)
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)

	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	hb := res.h
	deadline := ha.lk.Deadline()
	t.Logf("Deadline %v before the server's expiry; lease ended %v after the Deadline; B obtained %v after the Deadline",
		time.UnixMilli(int64(expiresAt)).Sub(deadline.Round(0)), at.Sub(deadline), hb.obtained.Sub(deadline))
	// Deadline carries a wall-clock reading too: compare on that clock.
	require.Less(t, float64(deadline.UnixMilli()), expiresAt, "the Deadline is not before the server-side expiry")
	require.WithinDuration(t, deadline, at, slack, "the lease did not end at the Deadline")
	require.True(t, deadline.Before(hb.obtained), "the old holder's window reaches into the new holder's")
	ok, _ = hb.writeRecord(r.store, job(key, 1))
	require.True(t, ok)

	p.Heal()
	require.Eventually(t, func() bool { return p.Held(faults.ToServer)+p.Held(faults.ToClient) == 0 }, 5*time.Second, time.Millisecond,
		"the held-back requests were not delivered")
	r.faultSpan("blackhole", cut, time.Now(), false)
	require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
	require.ElementsMatch(t, []string{hb.lk.Token(), hc.lk.Token()}, holderTokens(t, semB),
		"a late renewal brought back the cut-off holder's permit")
	ok, _ = ha.writeRecord(r.store, job(key, 1))
	require.False(t, ok)
	require.NoError(t, leaseC.Err(), "the other holder lost its permit")
	require.NoError(t, b.release(ctx, hb))
	require.NoError(t, c.release(ctx, hc))
	rep := r.check(t)
	require.Equal(t, limit, rep.Peak[key])
}
