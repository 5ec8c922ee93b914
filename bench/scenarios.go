package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A scenario is one workload, run for every library in turn.
type scenario struct {
	id        string // for -scenarios
	title     string
	contended bool // all workers on one key, holding it for the hold time
	// permits makes a contended scenario one of a counted semaphore with
	// that many permits, run by the semaphore libraries; 0 for a lock.
	permits int
	// reads makes a contended scenario one of a read-write lock, run by
	// the read-write libraries: each acquisition is a read hold with this
	// probability, otherwise a write hold; 0 for a lock or a semaphore.
	reads float64
	// set makes a scenario one of sets of locks, run by the set
	// libraries: each worker takes set keys at once, of a ring of pool
	// keys in one hash slot (see setKeys); 0 for any other.
	set, pool int
	workers   int
	lockers   int // instances of the library, each with its own client; workers are dealt round-robin
}

var scenarios = []scenario{
	{id: "serial", title: "1. Serial, uncontended: Obtain + Release on one key, one goroutine", workers: 1, lockers: 1},
	{id: "parallel", title: "2. 64 goroutines on 64 distinct keys, one instance", workers: 64, lockers: 1},
	{id: "contended16", title: "3. 16 goroutines over 2 instances (8 each) contending on one key", contended: true, workers: 16, lockers: 2},
	{id: "contended256", title: "4. 256 goroutines over 2 instances (128 each) contending on one key", contended: true, workers: 256, lockers: 2},
	{id: "sem16n1", title: "5. Semaphore of 1 permit: 16 goroutines over 2 instances (8 each) on one semaphore", contended: true, permits: 1, workers: 16, lockers: 2},
	{id: "sem16n4", title: "6. Semaphore of 4 permits: 16 goroutines over 2 instances (8 each) on one semaphore", contended: true, permits: 4, workers: 16, lockers: 2},
	{id: "sem256n1", title: "7. Semaphore of 1 permit: 256 goroutines over 2 instances (128 each) on one semaphore", contended: true, permits: 1, workers: 256, lockers: 2},
	{id: "sem256n4", title: "8. Semaphore of 4 permits: 256 goroutines over 2 instances (128 each) on one semaphore", contended: true, permits: 4, workers: 256, lockers: 2},
	{id: "rw16", title: "9. Read-write lock, 90% reads: 16 goroutines over 2 instances (8 each) on one lock", contended: true, reads: 0.9, workers: 16, lockers: 2},
	{id: "rw256", title: "10. Read-write lock, 90% reads: 256 goroutines over 2 instances (128 each) on one lock", contended: true, reads: 0.9, workers: 256, lockers: 2},
	{id: "set2", title: "11. Sets of 2 keys in one slot, serial, uncontended: obtain both + release, one goroutine", set: 2, pool: 2, workers: 1, lockers: 1},
	{id: "set16", title: "12. Sets of 2 keys of 8 in one slot: 16 goroutines over 2 instances (8 each), goroutine i takes keys i%8 and (i+1)%8", contended: true, set: 2, pool: 8, workers: 16, lockers: 2},
}

// limit is how many workers may be inside the critical section at once.
func (sc scenario) limit() int { return max(sc.permits, 1) }

// semaphore reports whether sc is run by the semaphore libraries.
func (sc scenario) semaphore() bool { return sc.permits > 0 }

// rw reports whether sc is run by the read-write libraries.
func (sc scenario) rw() bool { return sc.reads > 0 }

// sets reports whether sc is run by the set libraries.
func (sc scenario) sets() bool { return sc.set > 0 }

// cycles reports whether sc is an uncontended cycle of one lock (serial,
// parallel): each call returns at once, and cycleWorker runs it.
func (sc scenario) cycles() bool { return sc.lock() && !sc.contended }

// lock reports whether sc is run by the lock libraries.
func (sc scenario) lock() bool { return !sc.semaphore() && !sc.rw() && !sc.sets() }

// stopGrace bounds how long workers may take to stop once the measured
// window has ended and their contexts are cancelled.
const stopGrace = 15 * time.Second

// A bench holds what every run needs.
type bench struct {
	deployments deployments   // where each library runs, by its runsOn
	warmup      time.Duration // run, unmeasured, before the window
	measure     time.Duration // the measured window
	hold        time.Duration // how long a contended worker holds the lock
	// noDeadline makes the uncontended cycles (serial, parallel) call
	// with context.Background(), as a caller without a deadline does; by
	// default every call has the window's end as its deadline.
	noDeadline bool
}

// A tally is what the workers count in the measured window. A result
// sums the tallies of its workers, and of its rounds.
type tally struct {
	// ops counts Obtain+Release cycles, or acquisitions when contended.
	ops int64
	// Contended only.
	same        int64         // acquisitions by the goroutine that released just before
	sameOf      int64         // acquisitions that had a previous holder
	unmatched   int64         // gaps not measured: the previous release was not yet recorded
	nonPositive int64         // gaps <= 0: the next Obtain returned before the Release did
	holdSum     time.Duration // time actually held (the hold sleep overshoots)
	releaseSum  time.Duration // time spent in Release calls
	// Read-write scenarios only: the write holds among the ops, and
	// their part of holdSum.
	writes       int64
	writeHoldSum time.Duration
	// Obtain calls that gave up inside the window (retry budget spent),
	// and failures of any other kind.
	gaveUp int64
	errs   int64
}

func (t *tally) add(o *tally) {
	t.ops += o.ops
	t.same += o.same
	t.sameOf += o.sameOf
	t.unmatched += o.unmatched
	t.nonPositive += o.nonPositive
	t.holdSum += o.holdSum
	t.releaseSum += o.releaseSum
	t.writes += o.writes
	t.writeHoldSum += o.writeHoldSum
	t.gaveUp += o.gaveUp
	t.errs += o.errs
}

// A result is one library's figures for one scenario, over the measured
// window only.
type result struct {
	lib     lib
	elapsed time.Duration
	tally
	// lat is the cycle latency, or when contended the handoff gap, or in
	// a read-write scenario the time a read hold's obtain took.
	lat *hist
	// writeLat is the time a write hold's obtain took (read-write
	// scenarios only; may be nil otherwise).
	writeLat *hist
	mallocs  uint64
	// clientCPU is this process's CPU time (user and system) in the
	// window: the library's calls, go-redis, the runtime's garbage
	// collection and the benchmark's own bookkeeping.
	clientCPU time.Duration
	server    counters // sent to the deployment in the window, summed over its servers
	// Contended only.
	perWorker  []int64
	violations int64
	// peakReaders is the most readers inside at once, and longestGap the
	// longest time in the window in which nobody entered (read-write
	// only).
	peakReaders int64
	longestGap  time.Duration
	// firstErr is the text of the first failure counted in errs.
	firstErr string
	// err is set when the run itself failed; the figures are then void.
	err error
	// roundRatios is the rate of each round over the raw baseline's rate
	// in the same round (0 without a baseline).
	roundRatios []float64
}

// workerStats is one worker's share of a result; merged after the run.
type workerStats struct {
	tally
	lat      hist
	writeLat hist // read-write scenarios only
	firstErr error
}

func (st *workerStats) fail(err error) {
	if st.errs == 0 {
		st.firstErr = err
	}
	st.errs++
}

// window tells the workers which phase the run is in.
type window struct {
	phase atomic.Int32 // 0 warming up, 1 measuring, 2 over
	end   time.Time    // end of the measured window; obtain ctx deadline
}

func (w *window) counts(t time.Time) bool { return w.phase.Load() == 1 && t.Before(w.end) }

// contention is the state the contended workers share.
type contention struct {
	base  time.Time // origin of the monotonic timestamps below
	limit int64     // how many may be inside the critical section: 1, or a semaphore's permits
	inCS  atomic.Int64
	// violations counts entries that made inCS exceed limit.
	violations atomic.Int64
	waiting    atomic.Int64 // goroutines inside obtain
	seq        atomic.Int64 // acquisitions so far; numbers them
	lastHolder atomic.Int64 // worker id of the latest acquisition, -1 at first
	// released counts the Releases that have returned, when limit > 1.
	released atomic.Int64
	// releases[r%len] records when release r returned, so that the
	// acquisition it freed can measure its gap even when its Obtain
	// returned before that Release did. With one holder at a time,
	// release r is acquisition r's, and frees acquisition r+1. With
	// limit > 1, acquisition s needs s-limit releases before it, so
	// release r (numbered in the order the Release calls return, which
	// is close to the order Redis ran them) frees acquisition r+limit.
	releases [1024]releaseMark
}

type releaseMark struct {
	seq    atomic.Int64 // the acquisition this mark is for; stored last
	at     atomic.Int64 // nanoseconds since base
	waited atomic.Bool  // another goroutine was waiting when it was released
}

// run runs one scenario for one library: a warm-up, then the measured
// window, then it waits for every worker to stop.
func (b *bench) run(ctx context.Context, sc scenario, l lib) *result {
	res := &result{lib: l, lat: new(hist), writeLat: new(hist)}
	d := b.deployments[l.runsOn()]
	if err := d.flushAll(ctx); err != nil {
		res.err = err
		return res
	}
	lockers, err := openLockers(ctx, l, d, sc)
	if err != nil {
		res.err = err
		return res
	}
	defer func() {
		for _, lk := range lockers {
			lk.close()
		}
	}()

	var w window
	start := time.Now()
	measureFrom := start.Add(b.warmup)
	w.end = measureFrom.Add(b.measure)
	obtainCtx, cancelObtain := context.WithDeadline(ctx, w.end)
	defer cancelObtain()
	// Releases must not fail because the window ended.
	releaseCtx, cancelRelease := context.WithDeadline(context.WithoutCancel(ctx), w.end.Add(stopGrace))
	defer cancelRelease()
	if b.noDeadline && sc.cycles() {
		// An uncontended call returns at once: the cycle loop ends at the
		// window's end by itself.
		obtainCtx, releaseCtx = context.Background(), context.Background()
	}

	stats := make([]workerStats, sc.workers)
	c := &contention{base: start, limit: int64(sc.limit())}
	c.lastHolder.Store(-1)
	for i := range c.releases {
		c.releases[i].seq.Store(-1)
	}
	g := &rwGate{base: start}
	sg := newSetGate(sc.pool)
	var rwLockers []rwLocker
	if sc.rw() {
		for _, lk := range lockers {
			rl, ok := lk.(rwLocker)
			if !ok {
				res.err = fmt.Errorf("%s has no read holds", l.name())
				return res
			}
			rwLockers = append(rwLockers, rl)
		}
	}
	var setLockers []setLocker
	if sc.sets() {
		for _, lk := range lockers {
			sl, ok := lk.(setLocker)
			if !ok {
				res.err = fmt.Errorf("%s takes no sets", l.name())
				return res
			}
			setLockers = append(setLockers, sl)
		}
	}
	var timers []*holdTimer
	defer func() {
		for _, t := range timers {
			t.close()
		}
	}()
	if sc.contended {
		for range sc.workers {
			t, err := newHoldTimer()
			if err != nil {
				res.err = err
				return res
			}
			timers = append(timers, t)
		}
	}
	var wg sync.WaitGroup
	for i := range sc.workers {
		lk := lockers[i%len(lockers)]
		st := &stats[i]
		switch {
		case sc.sets():
			sl := setLockers[i%len(setLockers)]
			keys, slots := setKeys(i, sc.set, sc.pool)
			var timer *holdTimer
			if sc.contended {
				timer = timers[i]
			}
			wg.Go(func() { setWorker(obtainCtx, releaseCtx, &w, sg, keys, slots, b.hold, timer, sl, st) })
		case sc.rw():
			rl, rng := rwLockers[i%len(rwLockers)], newWorkerRand(i)
			wg.Go(func() { rwWorker(obtainCtx, releaseCtx, &w, g, sc.reads, b.hold, timers[i], rl, rng, st) })
		case sc.contended:
			wg.Go(func() { contendedWorker(obtainCtx, releaseCtx, &w, c, b.hold, timers[i], lk, int64(i), st) })
		default:
			wg.Go(func() { cycleWorker(obtainCtx, releaseCtx, &w, lk, "bench:key:"+strconv.Itoa(i), st) })
		}
	}

	if err := sleepUntil(ctx, measureFrom); err != nil {
		res.err = err
	}
	before, err := d.snapshot(ctx)
	res.err = errors.Join(res.err, err)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	from := time.Now()
	g.open(from)
	w.phase.Store(1)

	res.err = errors.Join(res.err, sleepUntil(ctx, w.end))
	w.phase.Store(2)
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)
	after, err := d.snapshot(ctx)
	res.err = errors.Join(res.err, err)
	cancelObtain()

	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		// The goroutines are left running; main exits non-zero.
		res.err = fmt.Errorf("workers still running %v after the window ended", stopGrace)
		return res
	}

	res.elapsed = w.end.Sub(from)
	res.mallocs = m1.Mallocs - m0.Mallocs
	res.clientCPU = cpu1 - cpu0
	res.server = after.sub(before)
	res.violations = c.violations.Load() + g.violations.Load() + sg.violations.Load()
	res.peakReaders = g.peakReaders.Load()
	res.longestGap = g.longestGap(w.end)
	for i := range stats {
		st := &stats[i]
		res.tally.add(&st.tally)
		res.lat.merge(&st.lat)
		res.writeLat.merge(&st.writeLat)
		if st.firstErr != nil && res.firstErr == "" {
			res.firstErr = st.firstErr.Error()
		}
		if sc.contended {
			res.perWorker = append(res.perWorker, st.ops)
		}
	}
	return res
}

// openLockers makes sc.lockers instances of l and runs one uncontended
// cycle on each, of a set in a set scenario, so that connections are open
// and scripts loaded before timing.
func openLockers(ctx context.Context, l lib, d *deployment, sc scenario) ([]locker, error) {
	var lockers []locker
	for i := range sc.lockers {
		// (newLocker may wait out a restart guard first: the time for
		// the cycle starts after it.)
		lk, err := l.newLocker(d)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err = prime(pctx, lk, sc, i); err != nil {
				lk.close()
			}
			cancel()
		}
		if err != nil {
			for _, lk := range lockers {
				lk.close()
			}
			return nil, fmt.Errorf("%s: prepare instance %d: %w", l.name(), i, err)
		}
		lockers = append(lockers, lk)
	}
	return lockers, nil
}

// prime runs one uncontended cycle on instance i, lk: of a set of two
// keys in a set scenario, so that the set's own scripts are loaded, and
// otherwise of one key.
func prime(ctx context.Context, lk locker, sc scenario, i int) error {
	if sl, ok := lk.(setLocker); ok && sc.sets() {
		var hs heldSet
		tag := "{bench:prime:" + strconv.Itoa(i) + "}"
		if err := sl.obtainSet(ctx, []string{tag + ":a", tag + ":b"}, &hs); err != nil {
			return err
		}
		return hs.release(ctx)
	}
	h, err := lk.obtain(ctx, "bench:prime:"+strconv.Itoa(i))
	if err != nil {
		return err
	}
	return h.release(ctx)
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// obtainFailed sorts a failed obtain. It reports whether the worker should
// stop: the window is over.
func obtainFailed(ctx context.Context, w *window, st *workerStats, err error) (stop bool) {
	switch {
	case ctx.Err() != nil:
		return true
	case errors.Is(err, errNotObtained):
		if w.counts(time.Now()) {
			st.gaveUp++
		}
	default:
		st.fail(err)
		time.Sleep(time.Millisecond) // do not spin on a broken server
	}
	return false
}

// cycleWorker obtains and releases key in a loop until the window ends,
// recording the latency of each whole cycle.
func cycleWorker(obtainCtx, releaseCtx context.Context, w *window, lk locker, key string, st *workerStats) {
	for time.Now().Before(w.end) {
		t0 := time.Now()
		h, err := lk.obtain(obtainCtx, key)
		if err != nil {
			if obtainFailed(obtainCtx, w, st, err) {
				return
			}
			continue
		}
		err = h.release(releaseCtx)
		t1 := time.Now()
		if err != nil {
			st.fail(err)
			continue
		}
		if w.counts(t1) {
			st.ops++
			st.lat.record(t1.Sub(t0))
		}
	}
}

// contendedWorker competes for the one key until the window ends. Each
// acquisition checks mutual exclusion (at most c.limit inside), holds the
// lock or permit for hold, and measures the handoff gap: from the Release
// that freed it returning (the previous holder's, for a lock) to this
// Obtain returning, when someone was waiting at that release.
func contendedWorker(obtainCtx, releaseCtx context.Context, w *window, c *contention, hold time.Duration, timer *holdTimer, lk locker, id int64, st *workerStats) {
	const key = "bench:contended"
	n := int64(len(c.releases))
	for time.Now().Before(w.end) {
		c.waiting.Add(1)
		h, err := lk.obtain(obtainCtx, key)
		c.waiting.Add(-1)
		acquired := time.Now()
		if err != nil {
			if obtainFailed(obtainCtx, w, st, err) {
				return
			}
			continue
		}
		if c.inCS.Add(1) > c.limit {
			c.violations.Add(1)
		}
		s := c.seq.Add(1)
		prevHolder := c.lastHolder.Swap(id)
		counted := w.counts(acquired)

		if err := timer.sleep(hold); err != nil {
			st.fail(fmt.Errorf("hold: %w", err))
		}
		releasing := time.Now()

		// By now the Release that freed this acquisition has returned
		// and been recorded, even if this Obtain returned first.
		if counted {
			st.ops++
			if prevHolder >= 0 {
				st.sameOf++
				if prevHolder == id {
					st.same++
				}
			}
			if freed := s - c.limit; freed > 0 {
				switch prev := &c.releases[freed%n]; {
				case prev.seq.Load() != freed:
					st.unmatched++
				case prev.waited.Load():
					gap := acquired.Sub(c.base) - time.Duration(prev.at.Load())
					if gap <= 0 {
						st.nonPositive++
					}
					st.lat.record(gap)
				}
			}
		}
		others := c.waiting.Load() > 0
		c.inCS.Add(-1)
		err = h.release(releaseCtx)
		released := time.Since(c.base)
		if counted {
			st.holdSum += releasing.Sub(acquired)
			st.releaseSum += released - releasing.Sub(c.base)
		}
		r := s
		if c.limit > 1 {
			r = c.released.Add(1)
		}
		mark := &c.releases[r%n]
		mark.at.Store(int64(released))
		mark.waited.Store(others)
		mark.seq.Store(r)
		if err != nil {
			st.fail(fmt.Errorf("release: %w", err))
		}
	}
}

// add folds o, another round of the same scenario and library, into r
// and returns the sum; r may be nil.
func (r *result) add(o *result) *result {
	if r == nil {
		return o
	}
	r.err = errors.Join(r.err, o.err)
	r.elapsed += o.elapsed
	r.tally.add(&o.tally)
	r.lat.merge(o.lat)
	if o.writeLat != nil {
		if r.writeLat == nil {
			r.writeLat = new(hist)
		}
		r.writeLat.merge(o.writeLat)
	}
	r.peakReaders = max(r.peakReaders, o.peakReaders)
	r.longestGap = max(r.longestGap, o.longestGap)
	r.mallocs += o.mallocs
	r.clientCPU += o.clientCPU
	r.server.add(o.server)
	r.roundRatios = append(r.roundRatios, o.roundRatios...)
	for i, n := range o.perWorker {
		if i < len(r.perWorker) {
			r.perWorker[i] += n
		}
	}
	r.violations += o.violations
	if r.firstErr == "" {
		r.firstErr = o.firstErr
	}
	return r
}
