//go:build linux

package faults_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
)

// A writer writes to the fenced store: a *faults.Store in the test
// process, a *faults.RemoteStore in a helper process.
type writer interface {
	WriteRecord(record, under, holder string, fence int64) (bool, error)
}

// A tracker records the operations of one holder (a goroutine or a helper
// process) on a common clock.
type tracker struct {
	rec   faults.Recorder
	clock faults.Clock
	name  string
	// unfenced: the holder's calls are made without WithFencing (see
	// faults.Op.Unfenced); its name must then change from call to call.
	unfenced bool
}

// obtain calls Obtain and records it; on success it returns the holding,
// whose window starts now.
func (tr *tracker) obtain(ctx context.Context, l *locksmith.Locker, key string, opts ...locksmith.Option) (*holding, error) {
	call := time.Now()
	lk, err := l.Obtain(ctx, key, opts...)
	ret := time.Now()
	return tr.obtained(key, 0, call, ret, lk, err), err
}

// acquire calls s.Acquire and records it; on success it returns the
// holding of the permit, whose window starts now.
func (tr *tracker) acquire(ctx context.Context, s *locksmith.Semaphore, opts ...locksmith.Option) (*holding, error) {
	call := time.Now()
	lk, err := s.Acquire(ctx, opts...)
	ret := time.Now()
	return tr.obtained(s.Key(), s.Limit(), call, ret, lk, err), err
}

// obtainAll calls ObtainAll on keys, of two or more, and records it: one
// op per key of the set (see faults.Op.Set). On success it returns the
// holding of the set, whose window starts now.
func (tr *tracker) obtainAll(ctx context.Context, l *locksmith.Locker, keys []string, opts ...locksmith.Option) (*setHolding, error) {
	call := time.Now()
	lk, err := l.ObtainAll(ctx, keys, opts...)
	ret := time.Now()
	return tr.obtainedSet(keys, call, ret, lk, err), err
}

// obtainedSet records an ObtainAll call on keys made from call to ret
// that returned lk and err, one op per key of the set, and returns the
// holding of the set when it succeeded.
func (tr *tracker) obtainedSet(keys []string, call, ret time.Time, lk *locksmith.Lock, err error) *setHolding {
	set := slices.Compact(slices.Sorted(slices.Values(keys)))
	sh := &setHolding{lk: lk}
	for _, k := range set {
		if h := tr.recordObtain(faults.Op{Key: k, Set: set}, call, ret, lk, err); h != nil {
			sh.parts = append(sh.parts, h)
		}
	}
	if err != nil {
		return nil
	}
	return sh
}

// obtainRW calls m.ObtainRead, or m.ObtainWrite when access is
// faults.AccessWrite, and records it; on success it returns the holding,
// whose window starts now.
func (tr *tracker) obtainRW(ctx context.Context, m *locksmith.RWMutex, access string, opts ...locksmith.Option) (*holding, error) {
	obtain := m.ObtainRead
	if access == faults.AccessWrite {
		obtain = m.ObtainWrite
	}
	call := time.Now()
	lk, err := obtain(ctx, opts...)
	ret := time.Now()
	h := tr.recordObtain(faults.Op{Key: m.Key(), Access: access}, call, ret, lk, err)
	return h, err
}

// obtained records an Obtain call made from call to ret that returned lk
// and err, and returns the holding when it succeeded. limit is 0 for a
// lock, and the semaphore's limit for an Acquire of a permit.
func (tr *tracker) obtained(key string, limit int, call, ret time.Time, lk *locksmith.Lock, err error) *holding {
	return tr.recordObtain(faults.Op{Key: key, Limit: limit}, call, ret, lk, err)
}

// recordObtain records an acquisition of what op's Key, Limit and Access
// name, made from call to ret, that returned lk and err, and returns the
// holding when it succeeded.
func (tr *tracker) recordObtain(op faults.Op, call, ret time.Time, lk *locksmith.Lock, err error) *holding {
	op.Kind, op.Holder, op.Outcome, op.Unfenced = faults.KindObtain, tr.name, outcome(err), tr.unfenced
	op.Call, op.Return = tr.clock.At(call), tr.clock.At(ret)
	if err != nil {
		op.Detail = err.Error()
		tr.rec.Record(op)
		return nil
	}
	h := &holding{tr: tr, key: op.Key, limit: op.Limit, access: op.Access, set: op.Set, lk: lk, call: call, obtained: ret}
	op.Fence = h.fence()
	tr.rec.Record(op)
	return h
}

// release calls Release (Resign for a term), records it, and ends the
// holding's window.
func (tr *tracker) release(ctx context.Context, h *holding) error {
	release, why := h.lk.Release, "released"
	if h.term != nil {
		release, why = h.term.Resign, "resigned"
	}
	call := time.Now()
	err := release(ctx)
	ret := time.Now()
	h.end(call, why)
	tr.recordRelease(h, call, ret, err)
	return err
}

// recordRelease records a release of h from call to ret that returned err.
func (tr *tracker) recordRelease(h *holding, call, ret time.Time, err error) {
	op := faults.Op{Kind: faults.KindRelease, Key: h.key, Set: h.set, Unfenced: tr.unfenced, Holder: tr.name, Fence: h.fence(),
		Call: tr.clock.At(call), Return: tr.clock.At(ret), Outcome: outcome(err)}
	if err != nil {
		op.Detail = err.Error()
	}
	tr.rec.Record(op)
}

// A holding is one acquisition of a lock, a permit or an election's
// leadership, from its return until the holder stopped believing it held
// it.
type holding struct {
	tr             *tracker
	key            string
	limit          int      // 0 for a lock; the semaphore's limit for a permit
	access         string   // a read-write lock's hold: faults.AccessRead or AccessWrite
	set            []string // the keys of the set this is a key of (ObtainAll), or nil
	lk             *locksmith.Lock
	term           *locksmith.Term // a leader's term, whose Lock is lk; nil for the others
	call, obtained time.Time

	mu            sync.Mutex
	leaseCtx      context.Context // the watched lease context, or nil
	leaseRecorded chan struct{}   // closed once leaseEnded is set
	leaseEnded    time.Time       // zero while the lease context is alive
	leaseCause    error
	ended         bool
}

// lease starts the lock's lease on ctx, and notes when its context ends.
func (h *holding) lease(ctx context.Context) context.Context {
	lctx := h.lk.Lease(ctx)
	h.watch(lctx)
	return lctx
}

// watch notes when the lease context lctx ends. Only the first call
// counts.
func (h *holding) watch(lctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leaseCtx != nil {
		return
	}
	recorded := make(chan struct{})
	h.leaseCtx, h.leaseRecorded = lctx, recorded
	context.AfterFunc(lctx, func() {
		at := time.Now()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.leaseEnded, h.leaseCause = at, context.Cause(lctx)
		close(recorded)
	})
}

// leaseEnd returns when the lease context ended, and why; zero while it
// has not.
func (h *holding) leaseEnd() (time.Time, error) {
	h.mu.Lock()
	lctx, recorded := h.leaseCtx, h.leaseRecorded
	h.mu.Unlock()
	if lctx != nil && lctx.Err() != nil {
		<-recorded // the callback runs just after the context ends
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leaseEnded, h.leaseCause
}

// end records the holding's window: from Obtain's return to the earliest
// of stop (when the holder stopped on its own, such as by calling
// Release), the end of the lease context, and the Deadline. The first
// call counts.
func (h *holding) end(stop time.Time, why string) {
	leaseEnded, _ := h.leaseEnd()
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.mu.Unlock()
	end := stop
	if !leaseEnded.IsZero() && leaseEnded.Before(end) {
		end, why = leaseEnded, "lease-ended"
	}
	if d := h.lk.Deadline(); d.Before(end) {
		end, why = d, "deadline"
	}
	h.tr.rec.Record(faults.Op{Kind: faults.KindHold, Key: h.key, Limit: h.limit, Access: h.access, Set: h.set, Unfenced: h.tr.unfenced,
		Holder: h.tr.name, Fence: h.fence(),
		ObtainCall: h.tr.clock.At(h.call), Call: h.tr.clock.At(h.obtained), Return: h.tr.clock.At(end), Outcome: why})
}

// fence returns the holding's fencing token: for a key of a set, that
// key's own.
func (h *holding) fence() int64 {
	if h.set != nil {
		return h.lk.FenceOf(h.key)
	}
	return h.lk.Fence()
}

// write writes to the store's record of the holding's key, with its
// fence, as a lock's holder does.
func (h *holding) write(w writer) (bool, error) {
	return w.WriteRecord(h.key, "", h.tr.name, h.fence())
}

// writeRecord writes to record with the holding's fence, as the holder of
// a semaphore's permit does to the job it claimed.
func (h *holding) writeRecord(w writer, record string) (bool, error) {
	return w.WriteRecord(record, h.key, h.tr.name, h.fence())
}

// A setHolding is one acquisition of a set of locks (ObtainAll): the
// holding of each of its keys, which share the set's Lock and window.
type setHolding struct {
	lk    *locksmith.Lock
	parts []*holding // one per key, in the set's order
}

// alone returns h as a set of its one key, for code that holds sets and
// single keys alike, or nil when h is nil.
func (h *holding) alone() *setHolding {
	if h == nil {
		return nil
	}
	return &setHolding{lk: h.lk, parts: []*holding{h}}
}

// lease starts the set's lease on ctx, and notes when its context ends.
func (sh *setHolding) lease(ctx context.Context) context.Context {
	lctx := sh.lk.Lease(ctx)
	sh.watch(lctx)
	return lctx
}

// watch notes when the set's lease context lctx ends.
func (sh *setHolding) watch(lctx context.Context) {
	for _, h := range sh.parts {
		h.watch(lctx)
	}
}

// write writes to the store's record of each key of the set, with that
// key's fence, and reports whether the store accepted every write.
func (sh *setHolding) write(w writer) bool {
	all := true
	for _, h := range sh.parts {
		ok, err := h.write(w)
		all = all && ok && err == nil
	}
	return all
}

// end records the set's window on each of its keys (see holding.end).
func (sh *setHolding) end(stop time.Time, why string) {
	for _, h := range sh.parts {
		h.end(stop, why)
	}
}

// releaseSet calls the set's Release, records it for each key, and ends
// the set's window: tracker.release, for a set (or a lock, alone).
func (tr *tracker) releaseSet(ctx context.Context, sh *setHolding) error {
	call := time.Now()
	err := sh.lk.Release(ctx)
	ret := time.Now()
	sh.end(call, "released")
	for _, h := range sh.parts {
		tr.recordRelease(h, call, ret, err)
	}
	return err
}

// workerConfig describes one soak worker.
type workerConfig struct {
	Name string   `json:"name"`
	Addr string   `json:"addr"` // the Redis (or proxy) the worker uses
	Keys []string `json:"keys"`
	Seed uint64   `json:"seed"`
	// ContextTimeouts makes the worker's client honour context deadlines
	// (go-redis ContextTimeoutEnabled); otherwise a request in flight
	// waits for the read timeout.
	ContextTimeouts bool `json:"contextTimeouts"`
	// PauseChance is the probability that a step of work ignores the lease
	// and sleeps past the TTL before writing, as a paused process would.
	PauseChance float64 `json:"pauseChance"`
	// Limit, when positive, makes Keys the names of semaphores with Limit
	// permits: the worker holds one of their permits at a time instead of
	// a lock, and writes nothing (its holders are up to Limit at once, so
	// a register that one fence guards is not theirs to share).
	Limit int `json:"limit,omitempty"`
	// RW makes Keys the names of read-write locks: the worker takes the
	// write hold a third of the time, and writes under it to the record
	// of the key as under a lock, and otherwise a read hold, under which
	// it writes nothing.
	RW bool `json:"rw,omitempty"`
	// Sets makes the worker take, half of the time, a set of two or more
	// of Keys at once (ObtainAll, or WithLocks a third of those times),
	// and write under it to the record of each key of the set with that
	// key's fence; the other half, one key, as a lock's worker does.
	Sets bool `json:"sets,omitempty"`
	// Elect makes Keys[0] the name of an election: the worker campaigns
	// in it, through Campaign or Run, leads for a few steps of work, each
	// a write to the record of the election's name with the term's
	// fence, and resigns (see electWorker).
	Elect bool `json:"elect,omitempty"`
}

// workerClient returns the go-redis client of a soak worker.
func workerClient(cfg workerConfig) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  cfg.Addr,
		Protocol:              2,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialTimeout:           time.Second,
		ContextTimeoutEnabled: cfg.ContextTimeouts,
	})
}

// runWorker takes locks on cfg's keys (or permits of its semaphores, or
// holds of its read-write locks, or sets of its keys),
// writes under the locks to w, and releases them, at random, until ctx
// ends, recording everything to rec. It returns the number of
// acquisitions.
func runWorker(ctx context.Context, cfg workerConfig, client *redis.Client, rec faults.Recorder, clock faults.Clock, w writer) int {
	rnd := rand.New(rand.NewPCG(cfg.Seed, uint64(len(cfg.Name))))
	tr := &tracker{rec: rec, clock: clock, name: cfg.Name}
	if cfg.Elect {
		return electWorker(ctx, cfg, client, tr, rnd, w)
	}
	l := locksmith.New(client, locksmith.WithFencing())
	defer l.Close()
	ttls := []time.Duration{300 * time.Millisecond, 500 * time.Millisecond, 800 * time.Millisecond}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo+1))) }
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	acquired := 0
	for ctx.Err() == nil {
		key := cfg.Keys[rnd.IntN(len(cfg.Keys))]
		var set []string // a set's keys, for ObtainAll
		if cfg.Sets && len(cfg.Keys) > 1 && rnd.IntN(2) == 0 {
			for _, i := range rnd.Perm(len(cfg.Keys))[:2+rnd.IntN(len(cfg.Keys)-1)] {
				set = append(set, cfg.Keys[i])
			}
		}
		ttl := ttls[rnd.IntN(len(ttls))]
		steps := 1 + rnd.IntN(6)
		access := ""
		if cfg.RW {
			access = faults.AccessRead
			if rnd.IntN(3) == 0 {
				access = faults.AccessWrite
			}
		}
		work := func(sh *setHolding, lctx context.Context) {
			for range steps {
				if rnd.Float64() < cfg.PauseChance {
					// A pause: the work stops looking at its lease for
					// longer than the TTL, then writes as if it still
					// held the lock.
					if !sleep(between(ttl, 2*ttl)) {
						return
					}
				} else if lctx.Err() != nil {
					return
				}
				if cfg.Limit == 0 && access != faults.AccessRead {
					sh.write(w)
				}
				if !sleep(between(5*time.Millisecond, 50*time.Millisecond)) {
					return
				}
			}
		}
		if rnd.IntN(3) == 0 {
			// Through WithLock, WithPermit or WithLocks, which lease and
			// release by themselves.
			call := time.Now()
			var sh *setHolding
			var stop time.Time
			fn := func(lctx context.Context) error {
				lk := locksmith.LockFromContext(lctx)
				if set != nil {
					sh = tr.obtainedSet(set, call, time.Now(), lk, nil)
				} else {
					sh = tr.recordObtain(faults.Op{Key: key, Limit: cfg.Limit, Access: access}, call, time.Now(), lk, nil).alone()
				}
				sh.watch(lctx)
				work(sh, lctx)
				stop = time.Now()
				return nil
			}
			opts := []locksmith.Option{locksmith.WithTTL(ttl),
				locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(20*time.Millisecond), 50))}
			var err error
			switch {
			case set != nil:
				err = l.WithLocks(ctx, set, fn, opts...)
			case access == faults.AccessRead:
				err = l.RWMutex(key).WithReadLock(ctx, fn, opts...)
			case access == faults.AccessWrite:
				err = l.RWMutex(key).WithWriteLock(ctx, fn, opts...)
			case cfg.Limit > 0:
				err = l.Semaphore(key, cfg.Limit).WithPermit(ctx, fn, opts...)
			default:
				err = l.WithLock(ctx, key, fn, opts...)
			}
			switch {
			case sh != nil:
				acquired++
				sh.end(stop, "released")
				for _, h := range sh.parts {
					tr.recordRelease(h, stop, time.Now(), err)
				}
			case set != nil:
				tr.obtainedSet(set, call, time.Now(), nil, err)
			default:
				tr.recordObtain(faults.Op{Key: key, Limit: cfg.Limit, Access: access}, call, time.Now(), nil, err)
			}
		} else {
			octx, cancel := context.WithTimeout(ctx, 2*ttl)
			opts := []locksmith.Option{locksmith.WithTTL(ttl),
				locksmith.WithRetry(locksmith.LinearBackoff(between(10*time.Millisecond, 40*time.Millisecond)))}
			var h *holding
			var sh *setHolding
			var err error
			switch {
			case set != nil:
				sh, err = tr.obtainAll(octx, l, set, opts...)
			case access != "":
				h, err = tr.obtainRW(octx, l.RWMutex(key), access, opts...)
			case cfg.Limit > 0:
				h, err = tr.acquire(octx, l.Semaphore(key, cfg.Limit), opts...)
			default:
				h, err = tr.obtain(octx, l, key, opts...)
			}
			cancel()
			if err == nil {
				if sh == nil {
					sh = h.alone()
				}
				acquired++
				work(sh, sh.lease(ctx))
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_ = tr.releaseSet(rctx, sh)
				cancel()
			}
		}
		sleep(between(time.Millisecond, 30*time.Millisecond))
	}
	return acquired
}
