package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The workload of the set scenarios (see sets.go for the libraries): which
// keys each worker takes, the workers' loop, and what checks it.

// setKeyTag is the hash tag every key of the set scenarios shares, so that
// they lie in one Redis Cluster slot, as a set must.
const setKeyTag = "{bench:set}"

// setKeys returns the set of worker id: size consecutive keys of a ring of
// pool keys, from key id % pool on, sorted as ObtainAll sorts them, and
// the index in the ring of each. So with a pool of 8 and sets of 2,
// worker i takes keys i%8 and (i+1)%8, and workers i and i+8 the same
// pair.
func setKeys(id, size, pool int) (keys []string, slots []int) {
	for j := range size {
		slots = append(slots, (id+j)%pool)
	}
	slices.SortFunc(slots, func(a, b int) int { return strings.Compare(setKeyName(a), setKeyName(b)) })
	slots = slices.Compact(slots)
	for _, s := range slots {
		keys = append(keys, setKeyName(s))
	}
	return keys, slots
}

// setKeyName is the name of key slot of the ring.
func setKeyName(slot int) string { return setKeyTag + ":k" + strconv.Itoa(slot) }

// A setGate checks mutual exclusion key by key: each key of the ring may
// be inside one held set at a time.
type setGate struct {
	inside     []atomic.Int64 // by slot: the sets holding that key
	violations atomic.Int64
}

func newSetGate(pool int) *setGate { return &setGate{inside: make([]atomic.Int64, pool)} }

// enter records a set of the keys at slots entering, and reports false,
// counting one violation for each key, when another set held one of them.
func (g *setGate) enter(slots []int) bool {
	ok := true
	for _, s := range slots {
		if g.inside[s].Add(1) > 1 {
			g.violations.Add(1)
			ok = false
		}
	}
	return ok
}

// leave records a set that entered with slots leaving.
func (g *setGate) leave(slots []int) {
	for _, s := range slots {
		g.inside[s].Add(-1)
	}
}

// setWorker takes its set of keys, holds it for hold when timer is set
// (the contended scenario), and releases it, in a loop until the window
// ends. Contended, it records how long each obtain took; uncontended, how
// long each whole cycle took.
func setWorker(obtainCtx, releaseCtx context.Context, w *window, g *setGate, keys []string, slots []int, hold time.Duration, timer *holdTimer, lk setLocker, st *workerStats) {
	var hs heldSet
	for time.Now().Before(w.end) {
		start := time.Now()
		err := lk.obtainSet(obtainCtx, keys, &hs)
		acquired := time.Now()
		if err != nil {
			if obtainFailed(obtainCtx, w, st, err) {
				return
			}
			continue
		}
		g.enter(slots)
		if timer != nil {
			if err := timer.sleep(hold); err != nil {
				st.fail(fmt.Errorf("hold: %w", err))
			}
		}
		leaving := time.Now()
		g.leave(slots)
		err = hs.release(releaseCtx)
		done := time.Now()
		if err != nil {
			st.fail(fmt.Errorf("release: %w", err))
			continue
		}
		switch {
		case timer != nil && w.counts(acquired):
			st.ops++
			st.lat.record(acquired.Sub(start))
			st.holdSum += leaving.Sub(acquired)
			st.releaseSum += done.Sub(leaving)
		case timer == nil && w.counts(done):
			st.ops++
			st.lat.record(done.Sub(start))
		}
	}
}
