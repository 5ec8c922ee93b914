package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"
)

// The workload of the read-write scenarios (see rwlocks.go for the
// libraries): the workers' loop and what checks it.

// An rwGate checks what a read-write lock promises the workers inside it:
// one writer alone, or any number of readers. One atomic word counts
// both, readers in its low 32 bits and writers above, so each entry sees
// the exact state it entered.
//
// It also finds the longest time in the measured window in which nobody
// entered, the symptom of a lock that waiters wait on while nobody holds
// it.
type rwGate struct {
	state      atomic.Int64
	violations atomic.Int64
	// peakReaders is the most readers seen inside at once in the
	// measured window.
	peakReaders atomic.Int64

	base time.Time // origin of last; set before any worker starts
	// last is the latest entry marked, in ns since base; maxGap the
	// longest time between two marked entries, or from open to the first.
	last, maxGap atomic.Int64
}

const rwWriterUnit = 1 << 32

// enter records a worker entering, as a writer when write is set, in the
// measured window when counted is (only those count towards the peak of
// readers). It reports false, and counts a violation, when a writer
// entered while anyone else was inside, or a reader while a writer was.
func (g *rwGate) enter(write, counted bool) bool {
	ok := true
	if write {
		ok = g.state.Add(rwWriterUnit) == rwWriterUnit
	} else {
		s := g.state.Add(1)
		ok = s < rwWriterUnit
		readers := s & (rwWriterUnit - 1)
		for counted {
			peak := g.peakReaders.Load()
			if readers <= peak || g.peakReaders.CompareAndSwap(peak, readers) {
				break
			}
		}
	}
	if !ok {
		g.violations.Add(1)
	}
	return ok
}

// leave records a worker leaving that entered with the same write.
func (g *rwGate) leave(write bool) {
	if write {
		g.state.Add(-rwWriterUnit)
	} else {
		g.state.Add(-1)
	}
}

// open starts the measured window at from: the gaps count from there.
// It must come before any mark of an entry in the window.
func (g *rwGate) open(from time.Time) { g.last.Store(int64(from.Sub(g.base))) }

// mark records an entry made at t in the measured window. Entries may be
// marked out of order: only one later than every earlier mark ends a gap.
func (g *rwGate) mark(t time.Time) {
	at := int64(t.Sub(g.base))
	for {
		prev := g.last.Load()
		if at <= prev {
			return
		}
		if g.last.CompareAndSwap(prev, at) {
			for gap := at - prev; ; {
				old := g.maxGap.Load()
				if gap <= old || g.maxGap.CompareAndSwap(old, gap) {
					return
				}
			}
		}
	}
}

// longestGap returns the longest time without an entry from open to end,
// the end of the window included.
func (g *rwGate) longestGap(end time.Time) time.Duration {
	return time.Duration(max(g.maxGap.Load(), int64(end.Sub(g.base))-g.last.Load()))
}

// newWorkerRand returns worker id's source of read-or-write draws: the
// same sequence for the same worker in every run and for every library.
func newWorkerRand(id int) *mrand.Rand {
	return mrand.New(mrand.NewPCG(uint64(id), 0x72776c6f636b))
}

// rwWorker runs the read-mostly loop until the window ends: draw a read
// (probability reads) or a write, obtain it, check the exclusion, hold
// for hold, release. It records how long each obtain call took, reads
// and writes apart.
func rwWorker(obtainCtx, releaseCtx context.Context, w *window, g *rwGate, reads float64, hold time.Duration, timer *holdTimer, lk rwLocker, rng *mrand.Rand, st *workerStats) {
	for time.Now().Before(w.end) {
		write := rng.Float64() >= reads
		start := time.Now()
		var (
			h   held
			err error
		)
		if write {
			h, err = lk.obtain(obtainCtx, rwKey)
		} else {
			h, err = lk.obtainRead(obtainCtx, rwKey)
		}
		acquired := time.Now()
		if err != nil {
			if obtainFailed(obtainCtx, w, st, err) {
				return
			}
			continue
		}
		counted := w.counts(acquired)
		g.enter(write, counted)
		if counted {
			g.mark(acquired)
		}
		if err := timer.sleep(hold); err != nil {
			st.fail(fmt.Errorf("hold: %w", err))
		}
		leaving := time.Now()
		g.leave(write)
		err = h.release(releaseCtx)
		if counted {
			st.ops++
			st.holdSum += leaving.Sub(acquired)
			st.releaseSum += time.Since(leaving)
			if write {
				st.writes++
				st.writeHoldSum += leaving.Sub(acquired)
				st.writeLat.record(acquired.Sub(start))
			} else {
				st.lat.record(acquired.Sub(start))
			}
		}
		if err != nil {
			st.fail(fmt.Errorf("release: %w", err))
		}
	}
}
