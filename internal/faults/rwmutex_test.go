//go:build linux

package faults_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The fault scenarios of read-write locks. Their writers write to the
// fenced register at the lock's key, as a lock's holders do; readers
// write nothing, and the checker counts their windows: any number may be
// open at once, but none beside a writer's.

const (
	read  = faults.AccessRead
	write = faults.AccessWrite
)

// readRefused checks that a try-once ObtainRead of key is refused, and
// records it.
func readRefused(t *testing.T, tr *tracker, l *locksmith.Locker, key string) {
	t.Helper()
	h, err := tr.obtainRW(t.Context(), l.RWMutex(key), read)
	require.ErrorIs(t, err, locksmith.ErrNotObtained, "a reader got in")
	require.Nil(t, h)
}

// A writer process killed while holding: two readers waiting in other
// Lockers get in within its TTL and their retry delay, together, with
// fences above the writer's.
func TestRWKilledWriterReadersGetIn(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, retry = "rw-killed", time.Second, 50 * time.Millisecond
	p := startHelper(t, r, helperConfig{Mode: modeHold, Redis: srv.Addr, Name: "writer-process", Key: key, RW: write, TTL: ttl})
	ready := p.await("ready", 10*time.Second)
	fence, err := strconv.ParseInt(ready.Detail, 10, 64)
	require.NoError(t, err)
	readRefused(t, r.tracker("X"), fencedLocker(t, srv.Addr, ttl), key)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	readers := []*tracker{r.tracker("reader-1"), r.tracker("reader-2")}
	got := make(chan obtainResult, len(readers))
	for _, tr := range readers {
		m := fencedLocker(t, srv.Addr, ttl).RWMutex(key)
		go func() {
			h, err := tr.obtainRW(wctx, m, read, locksmith.WithRetry(locksmith.LinearBackoff(retry)))
			got <- obtainResult{h, err}
		}()
	}

	killed := p.kill(r, fence)
	bound := ttl + defaultDrift(ttl) + retry
	var held []*holding
	for range readers {
		res := receive(t, got, 10*time.Second)
		require.NoError(t, res.err)
		res.h.lease(ctx)
		took := res.h.obtained.Sub(killed)
		t.Logf("%s got in %v after the kill; bound %v (+%v slack)", res.h.tr.name, took, bound, slack)
		require.Less(t, took, bound+slack)
		require.Greater(t, res.h.lk.Fence(), fence)
		held = append(held, res.h)
	}
	st, err := fencedLocker(t, srv.Addr, ttl).RWMutex(key).Inspect(ctx)
	require.NoError(t, err)
	require.Nil(t, st.Writer, "the killed writer's hold is still there")
	require.Len(t, st.Readers, 2, "the readers do not hold together")
	for _, h := range held {
		require.NoError(t, h.tr.release(ctx, h))
	}
	rep := r.check(t)
	require.True(t, rep.ReadWrite[key])
	require.Equal(t, 2, rep.Peak[key], "the most holders at once")
}

// A writer process stopped (SIGSTOP) past its TTL while writing to the
// fenced register: its window ends at its Deadline, a reader gets in only
// after it (the checker finds no overlap), and a later writer writes; the
// resumed process, writing on with its old fence and paying no heed to
// its lease, has every write refused.
func TestRWPausedWriterIsFenced(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	const key, ttl = "rw-paused-writer", 500 * time.Millisecond
	helper := startHelper(t, r, helperConfig{Mode: modeWriter, Redis: srv.Addr, Store: ss.Addr(),
		Name: "writer-process", Key: key, RW: write, TTL: ttl, After: 5})
	helper.await("ready", 10*time.Second)
	require.Eventually(t, func() bool { return count(r, "writer-process", faults.OutcomeAccepted) >= 3 },
		10*time.Second, time.Millisecond)

	stopped := time.Now()
	helper.signal(syscall.SIGSTOP)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rd, w := r.tracker("reader"), r.tracker("writer")
	hr, err := rd.obtainRW(wctx, fencedLocker(t, srv.Addr, 5*time.Second).RWMutex(key), read,
		locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
	require.NoError(t, err)
	hr.lease(ctx)
	require.NoError(t, rd.release(ctx, hr))
	hw, err := w.obtainRW(ctx, fencedLocker(t, srv.Addr, 5*time.Second).RWMutex(key), write)
	require.NoError(t, err)
	hw.lease(ctx)
	ok, _ := hw.write(r.store)
	require.True(t, ok, "the new writer's write was refused")
	time.Sleep(ttl) // the fault: well past its TTL
	helper.signal(syscall.SIGCONT)
	r.faultSpan("sigstop-writer", stopped, time.Now(), false)
	require.NoError(t, helper.wait(15*time.Second))
	require.NoError(t, w.release(ctx, hw))

	rep := r.check(t)
	window := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "writer-process" })
	readWindow := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "reader" })
	wrote := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindWrite && op.Holder == "writer" })
	var before, after, acceptedAfter int
	for _, op := range r.hist.Ops() {
		if op.Kind != faults.KindWrite || op.Holder != "writer-process" {
			continue
		}
		if op.Call < wrote.Call {
			before++
			continue
		}
		after++
		if op.Outcome == faults.OutcomeAccepted {
			acceptedAfter++
		}
	}
	t.Logf("the stopped writer's window ended by %s %v before the reader's began; it wrote %d times before the new writer and %d after, %d stale writes rejected",
		window.Outcome, time.Duration(readWindow.Call-window.Return), before, after, rep.StaleRejected)
	require.Equal(t, "deadline", window.Outcome, "the stopped writer's window ends at its Deadline")
	require.Greater(t, readWindow.Call, window.Return, "the reader's window overlaps the stopped writer's")
	require.Positive(t, before)
	require.Positive(t, after, "the resumed process made no write")
	require.Zero(t, acceptedAfter, "stale writes accepted")
	require.Zero(t, rep.StaleAccepted)
	require.Positive(t, rep.StaleRejected)
	require.Equal(t, 1, rep.Peak[key])
}

// A reader process stopped past its TTL while a writer waits for it: the
// writer's intent stops a new reader meanwhile, the writer gets in after
// the stopped reader's hold expires (within its TTL and the retry delay
// of the stop), and not before its Deadline; the resumed reader's lease
// ends with ErrLockLost and its Release finds nothing.
func TestRWPausedReaderWriterWaits(t *testing.T) {
	srv := redistest.New(t)
	r := newRun()
	ctx := t.Context()
	const key, ttl, retry = "rw-paused-reader", 500 * time.Millisecond, 10 * time.Millisecond
	helper := startHelper(t, r, helperConfig{Mode: modeHold, Redis: srv.Addr, Name: "reader-process", Key: key, RW: read, TTL: ttl})
	helper.await("ready", 10*time.Second)

	m := fencedLocker(t, srv.Addr, ttl).RWMutex(key)
	w := r.tracker("writer")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan obtainResult, 1)
	go func() {
		h, err := w.obtainRW(wctx, m, write, locksmith.WithRetry(locksmith.LinearBackoff(retry)))
		got <- obtainResult{h, err}
	}()
	require.Eventually(t, func() bool {
		st, err := m.Inspect(ctx)
		return err == nil && st.WaitingWriters > 0
	}, 10*time.Second, 5*time.Millisecond, "the writer left no intent")
	readRefused(t, r.tracker("X"), fencedLocker(t, srv.Addr, ttl), key)

	stopped := time.Now()
	helper.signal(syscall.SIGSTOP)
	res := receive(t, got, 10*time.Second)
	require.NoError(t, res.err)
	hw := res.h
	hw.lease(ctx)
	took := hw.obtained.Sub(stopped)
	bound := ttl + defaultDrift(ttl) + retry
	t.Logf("the writer got in %v after the reader was stopped; bound %v (+%v slack)", took, bound, slack)
	require.Less(t, took, bound+slack)
	helper.signal(syscall.SIGCONT)
	r.faultSpan("sigstop-reader", stopped, time.Now(), false)
	helper.stop()
	require.NoError(t, helper.wait(5*time.Second))
	require.NoError(t, w.release(ctx, hw))

	rep := r.check(t)
	window := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "reader-process" })
	released := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindRelease && op.Holder == "reader-process" })
	writeWindow := r.firstOp(t, func(op faults.Op) bool { return op.Kind == faults.KindHold && op.Holder == "writer" })
	t.Logf("the stopped reader's window ended by %s %v before the writer's began", window.Outcome, time.Duration(writeWindow.Call-window.Return))
	require.Equal(t, "deadline", window.Outcome, "the stopped reader's window ends at its Deadline")
	require.Greater(t, writeWindow.Call, window.Return, "the writer's window overlaps the stopped reader's")
	require.Equal(t, faults.OutcomeNotHeld, released.Outcome, "the resumed reader's Release found a hold")
	require.Equal(t, 1, rep.Peak[key])
}
