//go:build linux

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// slack allows for timers firing late and goroutines waiting for a core,
// under the race detector on a small machine. Bounds on timing are
// generous; the properties checked are not.
const slack = 250 * time.Millisecond

// defaultDrift is locksmith's default drift allowance for ttl.
func defaultDrift(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/2)
}

type obtainResult struct {
	h   *holding
	err error
}

// obtainAsync calls Obtain in a goroutine; the result arrives on the
// channel.
func obtainAsync(ctx context.Context, tr *tracker, l *locksmith.Locker, key string, opts ...locksmith.Option) <-chan obtainResult {
	ch := make(chan obtainResult, 1)
	go func() {
		h, err := tr.obtain(ctx, l, key, opts...)
		ch <- obtainResult{h, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan obtainResult, d time.Duration) obtainResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(d):
		t.Fatalf("Obtain did not return within %v", d)
	}
	return obtainResult{}
}

// A holder process killed without releasing blocks the others for at most
// its TTL: a waiting worker obtains the lock within TTL + drift + its
// retry interval of the kill.
func TestKilledHolderIsReplacedWithinTTL(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	const key, ttl, retry = "killed-holder", time.Second, 50 * time.Millisecond
	helper := startHelper(t, r, helperConfig{Mode: modeHold, Redis: srv.Addr, Name: "process", Key: key, TTL: ttl})
	helperFence, err := strconv.ParseInt(helper.await("ready", 10*time.Second).Detail, 10, 64)
	require.NoError(t, err)

	worker := r.tracker("worker")
	l := fencedLocker(t, srv.Addr, ttl)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := obtainAsync(ctx, worker, l, key, locksmith.WithRetry(locksmith.LinearBackoff(retry)))
	time.Sleep(3 * retry) // the worker is waiting

	killed := helper.kill(r, helperFence)

	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	took := res.h.obtained.Sub(killed)
	bound := ttl + defaultDrift(ttl) + retry
	t.Logf("the worker obtained the lock %v after the kill; bound %v (+%v slack)", took, bound, slack)
	require.Less(t, took, bound+slack)
	require.Greater(t, res.h.lk.Fence(), helperFence)
	require.NoError(t, worker.release(t.Context(), res.h))
	r.check(t)
}

// Redis restarted empty while a lock is held: the holder's lease ends with
// ErrLockLost within a renewal interval plus its timeouts, and its write
// with the old fence is rejected once the new holder has written, even
// while it still believes it holds the lock.
func TestRedisRestartedEmptyWhileHeld(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, renew = "restart", 5 * time.Second, 300 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	la := fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew))
	lb := fencedLocker(t, srv.Addr, ttl)

	ha, err := a.obtain(ctx, la, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	start := time.Now()
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	r.faultSpan("redis-restart", start, restarted, true)

	hb, err := b.obtain(ctx, lb, key)
	require.NoError(t, err, "the restarted server still has the old lock")
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence(), "fences must keep increasing across a restart")
	ok, _ = hb.write(r.store)
	require.True(t, ok)

	believed := lease.Err() == nil
	ok, _ = ha.write(r.store)
	require.False(t, ok, "the store accepted the old holder's write after the new holder's")
	t.Logf("the old holder's lease was still alive at its rejected write: %v", believed)

	require.True(t, waitDone(lease, renew+time.Second+slack), "the lease did not end")
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	t.Logf("the lease ended %v after the restart (renewal interval %v)", at.Sub(restarted), renew)
	require.Less(t, at.Sub(restarted), renew+time.Second, "later than a renewal interval plus go-redis's reconnection")

	require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
	require.NoError(t, b.release(ctx, hb))
	rep := r.check(t)
	t.Logf("holding windows overlapping across the restart (excused): %d", rep.ExcusedOverlaps)
}

// A holder cut off by a partition (a blackholing proxy) stops believing in
// its lock at its Deadline, which comes before the server lets the key
// expire: the old and the new holder's windows never overlap, and the old
// holder's renewals, delivered after the partition heals, change nothing.
func TestBlackholedHolderStopsBeforeExpiry(t *testing.T) {
	srv := redistest.New(t)
	p := newProxy(t, srv.Addr)
	r := newRun()
	ctx := t.Context()
	const key, ttl, renew = "blackhole", time.Second, 200 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	la := fencedLocker(t, p.Addr(), ttl, locksmith.WithRenewInterval(renew))
	lb := fencedLocker(t, srv.Addr, ttl)
	raw := newClient(t, srv.Addr)

	ha, err := a.obtain(ctx, la, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	time.Sleep(2*renew + renew/2) // renewed twice
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	cut := time.Now()
	p.Blackhole(true)
	time.Sleep(20 * time.Millisecond) // a request already past the proxy lands
	// When the server will expire the key, on its clock, which is this
	// machine's wall clock (Redis counts whole milliseconds).
	expiresAt, err := raw.Do(ctx, "PEXPIRETIME", key).Int64()
	require.NoError(t, err)
	require.Positive(t, expiresAt)
	expiry := time.UnixMilli(expiresAt)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hb, err := b.obtain(wctx, lb, key, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
	require.NoError(t, err)

	require.True(t, waitDone(lease, slack), "the lease outlived the lock")
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	deadline := ha.lk.Deadline()
	t.Logf("Deadline %v before the server's expiry; lease ended %v after the Deadline; B obtained %v after the Deadline",
		expiry.Sub(deadline.Round(0)), at.Sub(deadline), hb.obtained.Sub(deadline))
	// Deadline carries a wall-clock reading too: compare on that clock.
	require.Less(t, deadline.UnixMilli(), expiresAt, "the Deadline is not before the server-side expiry")
	require.WithinDuration(t, deadline, at, slack, "the lease did not end at the Deadline")
	require.True(t, deadline.Before(hb.obtained), "the old holder's window reaches into the new holder's")
	ok, _ = hb.write(r.store)
	require.True(t, ok)

	p.Heal()
	r.faultSpan("blackhole", cut, time.Now(), false)
	time.Sleep(3 * renew) // the held-back renewals arrive
	require.Equal(t, hb.lk.Token(), raw.Get(ctx, key).Val(), "a late renewal touched the new holder's lock")
	ok, _ = ha.write(r.store)
	require.False(t, ok)
	require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
	require.NoError(t, b.release(ctx, hb))
	r.check(t)
}

// A holder process stopped (SIGSTOP) past its TTL and then resumed goes on
// writing with its old fence, paying no heed to its lease; the fenced
// store rejects every one of those writes, since the new holder has
// written in between.
func TestPausedHolderProcessWritesAreRejected(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	const key, ttl = "paused", 500 * time.Millisecond
	helper := startHelper(t, r, helperConfig{Mode: modeWriter, Redis: srv.Addr, Store: ss.Addr(),
		Name: "process", Key: key, TTL: ttl, After: 5})
	helper.await("ready", 10*time.Second)
	time.Sleep(50 * time.Millisecond) // it writes a few times under its lock

	stopped := time.Now()
	helper.signal(syscall.SIGSTOP)
	b := r.tracker("B")
	lb := fencedLocker(t, srv.Addr, 5*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hb, err := b.obtain(ctx, lb, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
	require.NoError(t, err)
	ok, _ := hb.write(r.store)
	require.True(t, ok)
	time.Sleep(ttl) // well past its TTL
	helper.signal(syscall.SIGCONT)
	r.faultSpan("sigstop-holder", stopped, time.Now(), false)
	require.NoError(t, helper.wait(15*time.Second))
	require.NoError(t, b.release(t.Context(), hb))

	rep := r.check(t)
	bWrote := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindWrite && op.Holder == "B" })
	var before, after, acceptedAfter int
	for _, op := range r.hist.Ops() {
		if op.Kind != faults.KindWrite || op.Holder != "process" {
			continue
		}
		if op.Call < bWrote.Call {
			before++
			continue
		}
		after++
		if op.Outcome == faults.OutcomeAccepted {
			acceptedAfter++
		}
	}
	t.Logf("the process wrote %d times before the new holder and %d times after; %d stale writes rejected",
		before, after, rep.StaleRejected)
	require.Positive(t, before)
	require.Positive(t, after, "the resumed process made no write")
	require.Zero(t, acceptedAfter, "stale writes accepted")
	require.Zero(t, rep.StaleAccepted)
	require.Positive(t, rep.StaleRejected)
}

// The reply to an acquire delayed past the lock's validity is not a
// success: Obtain returns ErrLockLost and leaves no lock behind.
func TestLateAcquireReplyIsNotSuccess(t *testing.T) {
	srv := redistest.New(t)
	raw := newClient(t, srv.Addr)
	cases := []struct {
		name       string
		ttl, delay time.Duration
		opts       []locksmith.Option
	}{
		// The reply arrives after the key has expired.
		{name: "past the TTL", ttl: 300 * time.Millisecond, delay: 600 * time.Millisecond},
		// The reply arrives after the validity (TTL less a large drift
		// allowance) but well before the TTL: the key is gone when Obtain
		// returns because Obtain deleted it, not because it expired.
		{name: "past the validity", ttl: 3 * time.Second, delay: 700 * time.Millisecond,
			opts: []locksmith.Option{locksmith.WithDrift(2500 * time.Millisecond)}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := newProxy(t, srv.Addr)
			r := newRun()
			key := fmt.Sprintf("late-reply-%d", i)
			l := fencedLocker(t, p.Addr(), tc.ttl, tc.opts...)
			// Load the scripts and open the connection first, so that
			// the acquire is one round trip.
			warm, err := l.Obtain(ctx, key+"-warm-up")
			require.NoError(t, err)
			require.NoError(t, warm.Release(ctx))

			a := r.tracker("A")
			p.SetDelay(faults.ToClient, tc.delay)
			call := time.Now()
			h, err := a.obtain(ctx, l, key)
			took := time.Since(call)
			p.SetDelay(faults.ToClient, 0)
			r.faultSpan("reply-delay", call, time.Now(), false)
			require.Nil(t, h)
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			require.NotErrorIs(t, err, locksmith.ErrNotObtained)
			require.GreaterOrEqual(t, took, tc.delay)
			require.Zero(t, raw.Exists(ctx, key).Val(), "a lock remains")
			if tc.ttl > tc.delay {
				require.Less(t, took, tc.ttl, "too slow to tell deletion from expiry")
			}

			// Nobody is locked out.
			b := r.tracker("B")
			hb, err := b.obtain(ctx, newLocker(t, newClient(t, srv.Addr), locksmith.WithFencing()), key)
			require.NoError(t, err)
			require.NoError(t, b.release(ctx, hb))
			r.check(t)
		})
	}
}

// stallScenario holds a lock while stall makes the server stop answering
// for longer than the TTL (CLIENT PAUSE, DEBUG SLEEP). The holder's lease
// ends at its Deadline while the server is still stalled; a waiting
// worker gets the lock only after the stall; the windows do not overlap
// and the old holder's later write is rejected.
func stallScenario(t *testing.T, kind string, stallFor time.Duration, stall func(ctx context.Context, admin *redis.Client) error) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, renew = "stall", 500 * time.Millisecond, 100 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	la := fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew))
	lb := fencedLocker(t, srv.Addr, ttl)
	admin := newClient(t, srv.Addr, func(o *redis.Options) { o.ReadTimeout = stallFor + 5*time.Second })

	ha, err := a.obtain(ctx, la, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	stalled := time.Now()
	stallErr := make(chan error, 1)
	go func() { stallErr <- stall(ctx, admin) }()
	time.Sleep(20 * time.Millisecond) // the stall has begun
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// B waits for the lock. An attempt whose reply the stall delays past
	// the lock's validity fails with ErrLockLost, as documented, and B
	// tries again.
	got := make(chan obtainResult, 1)
	lateReplies := 0
	go func() {
		for {
			h, err := b.obtain(wctx, lb, key, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
			if errors.Is(err, locksmith.ErrLockLost) && wctx.Err() == nil {
				lateReplies++
				continue
			}
			got <- obtainResult{h, err}
			return
		}
	}()

	require.True(t, waitDone(lease, ttl+slack), "the lease outlived its Deadline")
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	require.WithinDuration(t, ha.lk.Deadline(), at, slack)
	require.Less(t, at.Sub(stalled), stallFor, "the lease should end while the server is stalled")

	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	require.NoError(t, <-stallErr)
	t.Logf("B's attempts answered too late to count: %d", lateReplies)
	stallEnd := stalled.Add(stallFor)
	r.faultSpan(kind, stalled, stallEnd, false)
	require.False(t, res.h.obtained.Before(stallEnd), "B obtained the lock during the stall")
	ok, _ = res.h.write(r.store)
	require.True(t, ok)
	ok, _ = ha.write(r.store)
	require.False(t, ok)
	require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
	require.NoError(t, b.release(ctx, res.h))
	r.check(t)
}

func TestClientPausePastTTL(t *testing.T) {
	const pause = 1500 * time.Millisecond
	stallScenario(t, "client-pause", pause, func(ctx context.Context, admin *redis.Client) error {
		return admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err()
	})
}

func TestDebugSleepPastTTL(t *testing.T) {
	const sleep = 1500 * time.Millisecond
	stallScenario(t, "debug-sleep", sleep, func(ctx context.Context, admin *redis.Client) error {
		return admin.Do(ctx, "DEBUG", "SLEEP", sleep.Seconds()).Err()
	})
}

// SCRIPT FLUSH is invisible to callers: go-redis answers NOSCRIPT with
// EVAL, so the lease keeps renewing and new locks are obtained.
func TestScriptFlushIsInvisible(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, renew = "script-flush", 500 * time.Millisecond, 50 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	l := fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew))
	admin := newClient(t, srv.Addr)

	ha, err := a.obtain(ctx, l, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	for range 10 {
		start := time.Now()
		require.NoError(t, admin.ScriptFlush(ctx).Err())
		r.faultSpan("script-flush", start, time.Now(), false)
		time.Sleep(renew)
	}
	require.NoError(t, lease.Err(), "the lease ended across script flushes")
	require.Equal(t, ha.lk.Token(), admin.Get(ctx, key).Val())
	ok, _ := ha.write(r.store)
	require.True(t, ok)
	require.NoError(t, a.release(ctx, ha))

	require.NoError(t, admin.ScriptFlush(ctx).Err())
	hb, err := b.obtain(ctx, l, key)
	require.NoError(t, err)
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence())
	require.NoError(t, b.release(ctx, hb))
	r.check(t)
}

// With Redis down, Obtain and WithLock fail with an error that is not
// ErrNotObtained (nobody knows whether the lock is free) and run nothing,
// a held lock's lease ends at its Deadline, and Release reports that Redis
// could not answer; once Redis is back, locking works again.
func TestRedisDown(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, renew = "down", 500 * time.Millisecond, 100 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	la := fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew))
	lb := fencedLocker(t, srv.Addr, ttl)

	ha, err := a.obtain(ctx, la, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)

	down := time.Now()
	srv.Stop()
	for _, opts := range [][]locksmith.Option{nil, {locksmith.WithRetry(locksmith.LinearBackoff(10 * time.Millisecond))}} {
		call := time.Now()
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := b.obtain(octx, lb, "other", opts...)
		cancel()
		require.Error(t, err)
		require.NotErrorIs(t, err, locksmith.ErrNotObtained, "an outage must not look like a held lock")
		require.NotErrorIs(t, err, locksmith.ErrLockLost)
		took := time.Since(call)
		require.Less(t, took, 10*time.Second, "Obtain waited as if the lock were held")
		t.Logf("Obtain (%d options) failed after %v with go-redis's default dial and command retries", len(opts), took)
	}
	ran := false
	err = lb.WithLock(ctx, "other", func(context.Context) error { ran = true; return nil })
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	require.False(t, ran, "WithLock ran its function without the lock")

	require.True(t, waitDone(lease, ttl+slack), "the lease outlived its Deadline")
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	require.WithinDuration(t, ha.lk.Deadline(), at, slack)
	err = a.release(ctx, ha)
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotHeld, "Release cannot know: Redis did not answer")

	require.NoError(t, srv.Start())
	r.faultSpan("redis-down", down, time.Now(), true)
	// After many failed dials a go-redis pool fails fast, with the last
	// dial error, until its background dial succeeds (about a second).
	var hb *holding
	back := time.Now()
	for hb == nil {
		hb, err = b.obtain(ctx, lb, key)
		if err != nil {
			require.Less(t, time.Since(back), 5*time.Second, "no lock after Redis came back: %v", err)
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("the first lock after the outage came %v after Redis was back", time.Since(back))
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence())
	require.ErrorIs(t, ha.lk.Release(ctx), locksmith.ErrNotHeld, "a retried Release must not touch the new holder's lock")
	require.NoError(t, b.release(ctx, hb))
	r.check(t)
}

// A connection dropped after the release request reached Redis, before
// its reply came back: the lock is gone all the same; Release reports
// ErrNotHeld when go-redis resends it (as the README says), or the
// network error when it does not, and a second Release then reports
// ErrNotHeld. Another client obtains the lock at once.
func TestDroppedConnectionMidRelease(t *testing.T) {
	srv := redistest.New(t)
	raw := newClient(t, srv.Addr)
	cases := []struct {
		name     string
		retries  int
		withLock bool
	}{
		{name: "Release, go-redis retrying", retries: 3},
		{name: "Release, no retries", retries: -1},
		{name: "WithLock", retries: 3, withLock: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := newProxy(t, srv.Addr)
			r := newRun()
			key := fmt.Sprintf("dropped-release-%d", i)
			c := newClient(t, p.Addr(), func(o *redis.Options) { o.MaxRetries = tc.retries })
			l := newLocker(t, c, locksmith.WithFencing(), locksmith.WithTTL(5*time.Second))
			// Load the scripts first: a NOSCRIPT reply is not the one
			// to drop.
			warm, err := l.Obtain(ctx, key+"-warm-up")
			require.NoError(t, err)
			require.NoError(t, warm.Release(ctx))
			a := r.tracker("A")

			var fired <-chan struct{}
			if tc.withLock {
				call := time.Now()
				var h *holding
				var stop time.Time
				err = l.WithLock(ctx, key, func(ctx context.Context) error {
					h = a.obtained(key, 0, call, time.Now(), locksmith.LockFromContext(ctx), nil)
					fired = p.ResetAfterRequest([]byte(h.lk.Token()))
					stop = time.Now()
					return nil
				})
				require.NotNil(t, h, "WithLock did not run its function: %v", err)
				h.end(stop, "released")
				a.recordRelease(h, stop, time.Now(), err)
				// WithLock's documentation promises ErrLockLost only for
				// a lock lost while fn ran, which this one was not.
				t.Logf("WithLock returned %v", err)
			} else {
				h, oerr := a.obtain(ctx, l, key)
				require.NoError(t, oerr)
				fired = p.ResetAfterRequest([]byte(h.lk.Token()))
				err = a.release(ctx, h)
				switch {
				case tc.retries >= 0:
					require.ErrorIs(t, err, locksmith.ErrNotHeld, "the resent release finds the key gone")
				default:
					require.Error(t, err)
					require.NotErrorIs(t, err, locksmith.ErrNotHeld)
					require.ErrorIs(t, h.lk.Release(ctx), locksmith.ErrNotHeld)
				}
			}
			select {
			case <-fired:
			case <-time.After(5 * time.Second):
				t.Fatal("the connection was not dropped")
			}
			r.faultSpan("reset-after-release", time.Now(), time.Now(), false)
			require.Zero(t, raw.Exists(ctx, key).Val(), "the release did not land")

			b := r.tracker("B")
			hb, err := b.obtain(ctx, newLocker(t, raw, locksmith.WithFencing()), key)
			require.NoError(t, err)
			require.NoError(t, b.release(ctx, hb))
			r.check(t)
		})
	}
}

// newReplica starts a replica of primary that replicates through a proxy,
// so that a test can cut the replication link, and waits until the link
// is up.
func newReplica(t *testing.T, primary string) (*redistest.Server, *faults.Proxy) {
	t.Helper()
	link := newProxy(t, primary)
	host, port, err := net.SplitHostPort(link.Addr())
	require.NoError(t, err)
	replica := redistest.New(t, "--replicaof", host, port)
	c := newClient(t, replica.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.Info(t.Context(), "replication").Val(), "master_link_status:up") {
		require.True(t, time.Now().Before(deadline), "the replica did not connect")
		time.Sleep(20 * time.Millisecond)
	}
	return replica, link
}

// A failover to a replica that had not received the lock: the promoted
// replica grants the lock again while the old holder still believes it
// holds it. This is the gap that asynchronous replication leaves (and
// that WithReplicas narrows); fencing still protects the resource,
// because the new primary's token, taken from its clock, is higher.
func TestFailoverToLaggingReplicaIsFencedOff(t *testing.T) {
	// No waiting for more replicas before the first full sync.
	primary := redistest.New(t, "--repl-diskless-sync-delay", "0")
	replica, link := newReplica(t, primary.Addr)
	r := newRun()
	ctx := t.Context()
	const key, ttl = "failover", 2 * time.Second
	a, b := r.tracker("A"), r.tracker("B")
	la := fencedLocker(t, primary.Addr, ttl)
	lb := fencedLocker(t, replica.Addr, ttl)

	// The replica falls behind: it never hears of A's lock.
	lagging := time.Now()
	link.Blackhole(true)
	ha, err := a.obtain(ctx, la, key)
	require.NoError(t, err)
	lease := ha.lease(ctx)
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	// The primary dies and the replica is promoted.
	primary.Kill()
	admin := newClient(t, replica.Addr)
	require.NoError(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	r.faultSpan("failover-to-lagging-replica", lagging, time.Now(), true)

	hb, err := b.obtain(ctx, lb, key)
	require.NoError(t, err, "the promoted replica should not know of A's lock")
	require.NoError(t, lease.Err(), "A still believes it holds the lock")
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence(), "the new primary's fence must be higher")
	ok, _ = hb.write(r.store)
	require.True(t, ok)
	ok, _ = ha.write(r.store)
	require.False(t, ok, "the store accepted the old holder's write after the new holder's")

	require.True(t, waitDone(lease, ttl+slack))
	_, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	ha.end(time.Now(), "stopped") // its Redis is gone: nothing to release
	require.NoError(t, b.release(ctx, hb))
	rep := r.check(t)
	require.Equal(t, 1, rep.ExcusedOverlaps, "both holders believed at once: the gap failover leaves")
}

// A Release during a partition: go-redis honours the caller's context for
// a command in flight only with ContextTimeoutEnabled; otherwise its
// ReadTimeout bounds the call, and the Release also waits for a renewal
// stuck in the same wait. Either way the lease ended at the Deadline, and
// Release reports that Redis did not answer, not ErrNotHeld.
func TestReleaseDuringPartition(t *testing.T) {
	srv := redistest.New(t)
	for _, contextTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", contextTimeouts), func(t *testing.T) {
			ctx := t.Context()
			p := newProxy(t, srv.Addr)
			r := newRun()
			c := newClient(t, p.Addr(), func(o *redis.Options) { o.ContextTimeoutEnabled = contextTimeouts })
			l := newLocker(t, c, locksmith.WithFencing(), locksmith.WithTTL(time.Second),
				locksmith.WithRenewInterval(200*time.Millisecond))
			a := r.tracker("A")
			key := fmt.Sprintf("partitioned-release-%v", contextTimeouts)
			h, err := a.obtain(ctx, l, key)
			require.NoError(t, err)
			lease := h.lease(ctx)
			time.Sleep(250 * time.Millisecond) // a renewal is in flight when the partition starts
			cut := time.Now()
			p.Blackhole(true)
			require.True(t, waitDone(lease, time.Second+slack))
			at, cause := h.leaseEnd()
			require.ErrorIs(t, cause, locksmith.ErrLockLost)
			require.WithinDuration(t, h.lk.Deadline(), at, slack)

			const budget = 500 * time.Millisecond
			rctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			start := time.Now()
			err = a.release(rctx, h)
			took := time.Since(start)
			require.Error(t, err)
			require.NotErrorIs(t, err, locksmith.ErrNotHeld)
			t.Logf("Release with a %v context returned after %v: %v", budget, took, err)
			if contextTimeouts {
				require.Less(t, took, budget+slack, "the context did not bound the Release")
			}
			p.Heal()
			r.faultSpan("blackhole", cut, time.Now(), false)
			r.check(t)
		})
	}
}
