//go:build linux

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The fault scenarios of elections. Leaders write to the fenced register
// at the election's name with their term's fence; the checker treats a
// term as a lock's holding (see election_worker_test.go), so that it
// finds at most one believed leader at any instant.

// awaitOp waits up to d for an operation matching f to be recorded in r,
// and returns the first.
func (r *run) awaitOp(t *testing.T, d time.Duration, f func(faults.Op) bool) faults.Op {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, op := range r.hist.Ops() {
			if f(op) {
				return op
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such operation recorded within %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// newTerm matches the campaign that won a term of name with a fence
// above fence.
func newTerm(name string, fence int64) func(faults.Op) bool {
	return func(op faults.Op) bool {
		return op.Kind == faults.KindObtain && op.Key == name && op.Outcome == faults.OutcomeOK && op.Fence > fence
	}
}

// awaitCandidates waits until n candidates (one a Locker) are queued for
// a handoff of the election name, as they are while they wait.
func awaitCandidates(t *testing.T, l *locksmith.Locker, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := l.Inspect(t.Context(), name)
		return err == nil && st.Queued >= n
	}, 10*time.Second, 5*time.Millisecond, "fewer than %d candidates wait in %q", n, name)
}

// campaignAsync campaigns in e in a goroutine; the result arrives on the
// channel.
func campaignAsync(ctx context.Context, tr *tracker, e *locksmith.Election) <-chan obtainResult {
	ch := make(chan obtainResult, 1)
	go func() {
		h, err := tr.campaign(ctx, e)
		ch <- obtainResult{h, err}
	}()
	return ch
}

// observed waits up to d for obs to post a leader with fence, and returns
// when it did.
func observed(t *testing.T, obs <-chan locksmith.Leader, fence int64, d time.Duration) time.Time {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, open := <-obs:
			require.True(t, open, "the observer's channel closed")
			if l.Fence == fence {
				return time.Now()
			}
		case <-timeout:
			t.Fatalf("no observer post of the leader with fence %d within %v", fence, d)
		}
	}
}

// requireLeader checks that e's leader is holder, with fence.
func requireLeader(t *testing.T, e *locksmith.Election, holder string, fence int64) {
	t.Helper()
	l, err := e.Leader(t.Context())
	require.NoError(t, err)
	require.Equal(t, holder, l.Value, "the leader")
	require.Equal(t, fence, l.Fence, "the leader's fence")
}

// The leader's process killed (SIGKILL) while two candidate processes
// wait, one campaigning through Campaign and one through Run: one of them
// leads within the TTL, drift and the campaign's retry delay of the kill
// (every attempt learns the leader's TTL, so about the TTL), with a
// higher fence; an observer in another process sees it within one
// announcement; the windows of the terms never overlap.
func TestElectionKilledLeaderTakenOver(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	const name, ttl = "elect-killed", time.Second
	candidate := func(name string, run bool) helperConfig {
		return helperConfig{Mode: modeCandidate, Redis: srv.Addr, Store: ss.Addr(), Name: name, Key: "elect-killed", TTL: ttl, Run: run}
	}
	first := startHelper(t, r, candidate("candidate-1", false))
	fence, err := strconv.ParseInt(first.await("leading", 10*time.Second).Detail, 10, 64)
	require.NoError(t, err)
	others := []*helperProc{startHelper(t, r, candidate("candidate-2", false)), startHelper(t, r, candidate("candidate-3", true))}
	l := fencedLocker(t, srv.Addr, ttl)
	e := l.Election(name)
	obs, err := e.Observe(ctx)
	require.NoError(t, err)
	observed(t, obs, fence, 10*time.Second)
	awaitCandidates(t, l, name, len(others))
	require.Eventually(t, func() bool { return count(r, "candidate-1", faults.OutcomeAccepted) >= 3 },
		10*time.Second, time.Millisecond, "the leader does not write")

	killed := first.kill(r, fence)
	won := r.awaitOp(t, 10*time.Second, newTerm(name, fence))
	seen := observed(t, obs, won.Fence, 10*time.Second)
	took := time.Duration(won.Return - r.clock.At(killed))
	bound := ttl + defaultDrift(ttl) + locksmith.DefaultCampaignDelay
	t.Logf("%s leads %v after the kill (TTL %v; bound %v, +%v slack); the observer saw it %v after the kill",
		won.Holder, took, ttl, bound, slack, seen.Sub(killed))
	require.Less(t, took, bound+slack)
	require.Less(t, seen.Sub(killed), bound+slack)
	requireLeader(t, e, won.Holder, won.Fence)
	require.Eventually(t, func() bool { return count(r, won.Holder, faults.OutcomeAccepted) >= 3 },
		10*time.Second, time.Millisecond, "the new leader does not write")

	for _, p := range others {
		p.stop()
	}
	for _, p := range others {
		require.NoError(t, p.wait(10*time.Second), "candidate %s", p.cfg.Name)
	}
	rep := r.check(t)
	require.Equal(t, 1, rep.Peak[name], "the most believed leaders at once")
	require.Zero(t, rep.Rejected, "a leader's write was refused")
}

// The leader's process stopped (SIGSTOP) past its TTL while it writes with
// its term's fence: a candidate waiting in another process leads after
// its Deadline (the windows do not overlap) and writes; the resumed
// process, writing on with its old fence and paying no heed to its term,
// has every write refused, and its term's context is done with
// ErrLockLost.
func TestElectionPausedLeaderIsFenced(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	const name, ttl, retry = "elect-paused", 500 * time.Millisecond, 10 * time.Millisecond
	helper := startHelper(t, r, helperConfig{Mode: modeCandidate, Redis: srv.Addr, Store: ss.Addr(),
		Name: "leader-process", Key: name, TTL: ttl, After: 5})
	helper.await("leading", 10*time.Second)
	require.Eventually(t, func() bool { return count(r, "leader-process", faults.OutcomeAccepted) >= 3 },
		10*time.Second, time.Millisecond, "the leader does not write")

	b := r.tracker("B")
	lb := fencedLocker(t, srv.Addr, 5*time.Second)
	e := lb.Election(name, locksmith.WithRetry(locksmith.LinearBackoff(retry)))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := campaignAsync(wctx, b, e)
	awaitCandidates(t, lb, name, 1)

	stopped := time.Now()
	helper.signal(syscall.SIGSTOP)
	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	hb := res.h
	took := hb.obtained.Sub(stopped)
	ok, _ := hb.write(r.store)
	require.True(t, ok, "the new leader's write was refused")
	time.Sleep(ttl) // the fault: well past its TTL
	helper.signal(syscall.SIGCONT)
	r.faultSpan("sigstop-leader", stopped, time.Now(), false)
	done := helper.await("done", 15*time.Second)
	require.NoError(t, helper.wait(10*time.Second), "the resumed leader's term did not end with ErrLockLost")
	requireLeader(t, e, "B", hb.lk.Fence())
	require.NoError(t, b.release(ctx, hb))

	rep := r.check(t)
	window := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "leader-process" })
	resigned := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindRelease && op.Holder == "leader-process" })
	bWindow := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "B" })
	bWrote := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindWrite && op.Holder == "B" })
	var before, after, acceptedAfter int
	for _, op := range r.hist.Ops() {
		if op.Kind != faults.KindWrite || op.Holder != "leader-process" {
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
	bound := ttl + defaultDrift(ttl) + retry
	t.Logf("B leads %v after the stop (bound %v, +%v slack); the stopped leader's window ended by %s %v before B's began; "+
		"it wrote %d times before B and %d after, %d stale writes refused; its term ended with %q",
		took, bound, slack, window.Outcome, time.Duration(bWindow.Call-window.Return), before, after, rep.StaleRejected, done.Detail)
	require.Less(t, took, bound+slack)
	require.Greater(t, hb.lk.Fence(), window.Fence)
	require.Equal(t, "deadline", window.Outcome, "the stopped leader's window ends at its Deadline")
	require.Greater(t, bWindow.Call, window.Return, "B's term overlaps the stopped leader's")
	require.Equal(t, faults.OutcomeNotHeld, resigned.Outcome, "the resumed leader's Resign found its term")
	require.Positive(t, before)
	require.Positive(t, after, "the resumed process made no write")
	require.Zero(t, acceptedAfter, "stale writes accepted")
	require.Zero(t, rep.StaleAccepted)
	require.Positive(t, rep.StaleRejected)
	require.Equal(t, 1, rep.Peak[name])
}

// Redis restarted empty (no persistence) while a leader leads: as for a
// lock, the server forgets the term, and a candidate leads at once while
// the old leader still believes (the checker excuses the overlap: a
// single Redis without persistence cannot prevent it). What still holds:
// the new term's fence is higher (tokens follow the server's clock), the
// old leader's write is refused once the new leader has written, the old
// term ends with ErrLockLost within a renewal interval plus go-redis's
// reconnection, its Proclaim and Resign report ErrNotHeld and change
// nothing, and an observer sees the new leader within its quiet period.
func TestElectionRedisRestartedEmpty(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const name, ttl, renew = "elect-restart", 5 * time.Second, 300 * time.Millisecond
	a, b := r.tracker("A"), r.tracker("B")
	ea := fencedLocker(t, srv.Addr, ttl, locksmith.WithRenewInterval(renew)).Election(name)
	eb := fencedLocker(t, srv.Addr, ttl).Election(name)
	obs, err := fencedLocker(t, srv.Addr, ttl).Election(name).Observe(ctx)
	require.NoError(t, err)

	ha, err := a.campaign(ctx, ea)
	require.NoError(t, err)
	observed(t, obs, ha.lk.Fence(), 10*time.Second)
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	start := time.Now()
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	r.faultSpan("redis-restart", start, restarted, true)

	hb, err := b.campaign(ctx, eb)
	require.NoError(t, err, "the restarted server still has the old term")
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence(), "fences must keep increasing across a restart")
	ok, _ = hb.write(r.store)
	require.True(t, ok)
	believed := ha.term.Context().Err() == nil
	ok, _ = ha.write(r.store)
	require.False(t, ok, "the store accepted the old leader's write after the new leader's")
	seen := observed(t, obs, hb.lk.Fence(), 10*time.Second)

	tctx := ha.term.Context()
	require.True(t, waitDone(tctx, renew+time.Second+slack), "the old term did not end")
	at, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	t.Logf("the old leader still believed at its refused write: %v; its term ended %v after the restart (renewal interval %v); "+
		"the observer saw the new leader %v after the restart",
		believed, at.Sub(restarted), renew, seen.Sub(restarted))
	require.Less(t, at.Sub(restarted), renew+time.Second, "later than a renewal interval plus go-redis's reconnection")
	require.Less(t, seen.Sub(restarted), 5*time.Second+slack, "later than the observer's quiet period")

	require.ErrorIs(t, ha.term.Proclaim(ctx, "A again"), locksmith.ErrNotHeld)
	require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
	requireLeader(t, eb, "B", hb.lk.Fence())
	require.NoError(t, b.release(ctx, hb))
	rep := r.check(t)
	t.Logf("terms overlapping across the restart (excused): %d", rep.ExcusedOverlaps)
}

// A leader cut off from Redis (through a proxy: a blackhole, its replies
// delayed past the TTL, or its requests delayed past the TTL) while a
// candidate waits: the leader's term ends with ErrLockLost at its
// Deadline, before the server expires the term, and the candidate leads
// only after that Deadline. Once the network heals, whatever the leader
// sent during the fault changes nothing: the candidate still leads, the
// old leader's write is refused and its Resign reports ErrNotHeld.
func TestElectionLeaderCutOff(t *testing.T) {
	srv := redistest.New(t)
	cases := []struct {
		name  string
		fault func(p *faults.Proxy)
	}{
		{"blackhole", func(p *faults.Proxy) { p.Blackhole(true) }},
		{"replies delayed past the TTL", func(p *faults.Proxy) { p.SetDelay(faults.ToClient, 1500*time.Millisecond) }},
		{"requests delayed past the TTL", func(p *faults.Proxy) { p.SetDelay(faults.ToServer, 1500*time.Millisecond) }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, srv.Addr)
			r := newRun()
			ctx := t.Context()
			name := fmt.Sprintf("elect-cut-off-%d", i)
			const ttl, renew = time.Second, 200 * time.Millisecond
			a, b := r.tracker("A"), r.tracker("B")
			ea := fencedLocker(t, p.Addr(), ttl, locksmith.WithRenewInterval(renew)).Election(name)
			lb := fencedLocker(t, srv.Addr, ttl)
			eb := lb.Election(name, locksmith.WithRetry(locksmith.LinearBackoff(5*time.Millisecond)))
			raw := newClient(t, srv.Addr)

			ha, err := a.campaign(ctx, ea)
			require.NoError(t, err)
			first := ha.lk.Deadline()
			require.Eventually(t, func() bool { return ha.lk.Deadline().After(first) }, 5*time.Second, time.Millisecond,
				"the term was never renewed")
			ok, _ := ha.write(r.store)
			require.True(t, ok)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			got := campaignAsync(wctx, b, eb)
			awaitCandidates(t, lb, name, 1)

			cut := time.Now()
			tc.fault(p)
			// When the server will expire A's term (in ms of its clock,
			// this machine's wall clock), read until A's term ends:
			// requests already past the proxy, or let through by a
			// delay, still renew it.
			tctx := ha.term.Context()
			var expiresAt int64
			for tctx.Err() == nil {
				if at, err := raw.PExpireTime(ctx, name).Result(); err == nil && at > 0 && raw.Get(ctx, name).Val() == ha.lk.Token() {
					expiresAt = at.Milliseconds()
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
			t.Logf("A's Deadline %v before the server's expiry; its term ended %v after the Deadline; B leads %v after the Deadline, %v after the fault began",
				time.UnixMilli(expiresAt).Sub(deadline.Round(0)), at.Sub(deadline), hb.obtained.Sub(deadline), hb.obtained.Sub(cut))
			// Deadline carries a wall-clock reading too: compare on that
			// clock.
			require.Less(t, deadline.UnixMilli(), expiresAt, "the Deadline is not before the server-side expiry")
			require.WithinDuration(t, deadline, at, slack, "the term did not end at its Deadline")
			require.True(t, deadline.Before(hb.obtained), "the old leader's window reaches into the new leader's")
			require.Greater(t, hb.lk.Fence(), ha.lk.Fence())
			ok, _ = hb.write(r.store)
			require.True(t, ok)

			p.Heal()
			require.Eventually(t, func() bool { return p.Held(faults.ToServer)+p.Held(faults.ToClient) == 0 }, 5*time.Second, time.Millisecond,
				"the held-back requests were not delivered")
			r.faultSpan(tc.name, cut, time.Now(), false)
			require.Equal(t, hb.lk.Token(), raw.Get(ctx, name).Val(), "a late request of the old leader touched the new term")
			requireLeader(t, eb, "B", hb.lk.Fence())
			ok, _ = ha.write(r.store)
			require.False(t, ok)
			require.ErrorIs(t, a.release(ctx, ha), locksmith.ErrNotHeld)
			require.NoError(t, b.release(ctx, hb))
			rep := r.check(t)
			require.Equal(t, 1, rep.Peak[name])
		})
	}
}

// A failover to a replica that had not received the term (the suite's
// failover, by hand, as for a lock): the promoted replica lets a
// candidate lead while the old leader still believes, the gap that
// asynchronous replication leaves and that the checker excuses; the new
// term's fence is higher, so the old leader's write is refused once the
// new leader has written, and the old term ends with ErrLockLost.
func TestElectionFailoverToLaggingReplicaIsFencedOff(t *testing.T) {
	primary := redistest.New(t, "--repl-diskless-sync-delay", "0")
	replica, link := newReplica(t, primary.Addr)
	r := newRun()
	ctx := t.Context()
	const name, ttl = "elect-failover", 2 * time.Second
	a, b := r.tracker("A"), r.tracker("B")
	ea := fencedLocker(t, primary.Addr, ttl).Election(name)
	eb := fencedLocker(t, replica.Addr, ttl).Election(name)

	lagging := time.Now()
	link.Blackhole(true)
	ha, err := a.campaign(ctx, ea)
	require.NoError(t, err)
	ok, _ := ha.write(r.store)
	require.True(t, ok)

	primary.Kill()
	admin := newClient(t, replica.Addr)
	require.NoError(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	r.faultSpan("failover-to-lagging-replica", lagging, time.Now(), true)

	hb, err := b.campaign(ctx, eb)
	require.NoError(t, err, "the promoted replica should not know of A's term")
	tctx := ha.term.Context()
	require.NoError(t, tctx.Err(), "A still believes it leads")
	require.Greater(t, hb.lk.Fence(), ha.lk.Fence(), "the new primary's fence must be higher")
	ok, _ = hb.write(r.store)
	require.True(t, ok)
	ok, _ = ha.write(r.store)
	require.False(t, ok, "the store accepted the old leader's write after the new leader's")
	requireLeader(t, eb, "B", hb.lk.Fence())

	require.True(t, waitDone(tctx, ttl+slack))
	_, cause := ha.leaseEnd()
	require.ErrorIs(t, cause, locksmith.ErrLockLost)
	ha.end(time.Now(), "stopped") // its Redis is gone: nothing to resign
	require.NoError(t, b.release(ctx, hb))
	rep := r.check(t)
	require.Equal(t, 1, rep.ExcusedOverlaps, "both leaders believed at once: the gap failover leaves")
}

// Run's context ending while the campaign that wins is in flight: Run
// documents that when ctx ends it resigns if it leads and returns
// ctx.Err(). The term must not be left behind, renewed in the background
// with nobody's work under it and blocking every other candidate until
// the Locker is closed. Two moments:
//
//   - while the reply of the winning attempt is held back by the proxy:
//     Obtain's own look at ctx after the reply gives the lock back;
//   - after that look, while Campaign announces the new leader to
//     observers (a PUBLISH, which a hook holds up until ctx has ended):
//     Campaign returns the term, and Run, finding ctx done, must resign
//     it before it returns ctx.Err() (it did not at first: this test
//     found it).
func TestElectionRunCancelledWhileWinning(t *testing.T) {
	srv := redistest.New(t)
	const ttl, delay = 500 * time.Millisecond, 300 * time.Millisecond
	for i, announcing := range []bool{false, true} {
		t.Run(map[bool]string{false: "during the winning attempt", true: "during the announcement"}[announcing], func(t *testing.T) {
			ctx := t.Context()
			name := fmt.Sprintf("elect-run-cancelled-%d", i)
			p := newProxy(t, srv.Addr)
			c := newClient(t, p.Addr())
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var arm atomic.Bool
			if announcing {
				c.AddHook(cancelOnPublish{arm: &arm, cancel: cancel})
			}
			e := newLocker(t, c, locksmith.WithTTL(ttl)).Election(name)
			other := fencedLocker(t, srv.Addr, ttl).Election(name)
			// Open the connection and load the scripts: the campaign is
			// then one round trip and its announcement.
			warm, err := e.Campaign(ctx, "warm-up")
			require.NoError(t, err)
			require.NoError(t, warm.Resign(ctx))

			ran := make(chan struct{}, 1)
			returned := make(chan error, 1)
			if announcing {
				arm.Store(true)
			} else {
				p.SetDelay(faults.ToClient, delay)
			}
			go func() {
				returned <- e.Run(rctx, "A", func(context.Context, *locksmith.Term) error {
					ran <- struct{}{}
					return nil
				})
			}()
			if !announcing {
				// The winning attempt's reply is held back by the proxy.
				require.Eventually(t, func() bool { return p.Held(faults.ToClient) > 0 }, 5*time.Second, time.Millisecond,
					"the campaign's reply was not held back")
				cancel()
			}
			var runErr error
			select {
			case runErr = <-returned:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
			p.SetDelay(faults.ToClient, 0)
			require.ErrorIs(t, runErr, context.Canceled)
			// Resigned, or at worst expired: no leader within 3 TTLs.
			deadline := time.Now().Add(3 * ttl)
			for {
				leader, err := other.Leader(ctx)
				if errors.Is(err, locksmith.ErrNoLeader) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Run returned %v (its work ran: %v), yet 3 TTLs later the election has a leader (value %q, fence %d, TTL %v; err %v): "+
						"a term nobody resigns, renewed in the background", runErr, len(ran) > 0, leader.Value, leader.Fence, leader.TTL, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// cancelOnPublish is a go-redis hook that, once armed, calls cancel
// before the first PUBLISH goes out.
type cancelOnPublish struct {
	arm    *atomic.Bool
	cancel context.CancelFunc
}

func (h cancelOnPublish) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelOnPublish) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" && h.arm.CompareAndSwap(true, false) {
			h.cancel()
		}
		return next(ctx, cmd)
	}
}

func (h cancelOnPublish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
