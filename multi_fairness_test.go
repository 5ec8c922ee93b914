package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// Fairness of sets of locks: sets (ObtainAll, WithLocks) and single keys
// (Obtain) that contend for the same keys all make progress, none
// starves, and a set and a single key waiting for the same key are served
// in the order they arrived.

const (
	// fairnessRunEnv names a duration, such as "1m", that each contended
	// run of this file lasts instead of its default.
	fairnessRunEnv = "LOCKSMITH_FAIRNESS_RUN"
	// fairnessSeedEnv names the seed of the random key sets, to repeat a
	// run whose seed a failure logged.
	fairnessSeedEnv = "LOCKSMITH_FAIRNESS_SEED"
)

const (
	// contendedTTL is the TTL of every lock of a contended run: so much
	// longer than a critical section (contendedSection) that no lock
	// expires while its holder is inside, and the in-memory exclusion
	// check can be trusted.
	contendedTTL = 10 * time.Second
	// contendedSection is how long a worker holds what it acquired.
	contendedSection = time.Millisecond
)

// contendedRetry is the retry strategy of every worker of a contended
// run. Each delay is a slot in which a waiting set tries again (or the
// head of a Locker's queue for a key, for single keys); releases wake
// queued waiters sooner.
var contendedRetry = locksmith.WithRetry(locksmith.LinearBackoff(20 * time.Millisecond))

// fairnessRun returns how long a contended run lasts: def, or the
// duration in LOCKSMITH_FAIRNESS_RUN.
func fairnessRun(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(fairnessRunEnv)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 30s", fairnessRunEnv, s)
	}
	return d
}

// fairnessSeed returns the seed of a run's random key sets, from
// LOCKSMITH_FAIRNESS_SEED or else the clock, and logs it.
func fairnessSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(fairnessSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", fairnessSeedEnv, s)
		}
	}
	t.Logf("seed %d (repeat with %s=%d)", seed, fairnessSeedEnv, seed)
	return seed
}

// callerKey is the context key of the kind of caller ("set", "single") a
// command is sent for, as sentByCaller counts them.
type callerKey struct{}

// asCaller returns ctx naming kind as the caller of the commands sent on
// it, and on the contexts derived from it (a lease's renewals included).
func asCaller(ctx context.Context, kind string) context.Context {
	return context.WithValue(ctx, callerKey{}, kind)
}

// sentByCaller is a hook that counts the commands a client sends, by the
// kind of caller their context names (see asCaller); commands on a
// context that names none count as "other". The handshake of a new
// connection (hello, client setinfo) is not counted, as counter does not.
type sentByCaller struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (s *sentByCaller) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sentByCaller) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (s *sentByCaller) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.record(ctx, cmd)
		}
		return next(ctx, cmds)
	}
}

func (s *sentByCaller) record(ctx context.Context, cmd redis.Cmder) {
	if name := strings.ToLower(cmd.Name()); name == "hello" || name == "client" {
		return
	}
	kind, ok := ctx.Value(callerKey{}).(string)
	if !ok {
		kind = "other"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[kind]++
}

// reset forgets the commands counted so far.
func (s *sentByCaller) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n = nil
}

// counts returns how many commands were sent, by kind of caller.
func (s *sentByCaller) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.n))
	for k, v := range s.n {
		out[k] = v
	}
	return out
}

// exclusion checks mutual exclusion in memory: it knows which worker is
// inside a critical section on each key. Redis cannot have let two
// workers in at once unless a lock expired while its holder was inside,
// which contendedTTL rules out.
type exclusion struct {
	keys   []string
	inside []atomic.Int32 // per key: the worker inside, plus one; 0 when none

	mu       sync.Mutex
	overlaps int      // guarded by mu
	first    []string // the first overlaps found, described; guarded by mu
}

func newExclusion(keys []string) *exclusion {
	return &exclusion{keys: keys, inside: make([]atomic.Int32, len(keys))}
}

// enter records worker as inside on each key of idx, and any other
// worker found inside on one of them as an overlap.
func (e *exclusion) enter(worker string, id int, idx []int) {
	for _, i := range idx {
		if prev := e.inside[i].Swap(int32(id + 1)); prev != 0 {
			e.mu.Lock()
			e.overlaps++
			if len(e.first) < 5 {
				e.first = append(e.first, fmt.Sprintf("%s entered %q while worker #%d was inside", worker, e.keys[i], prev-1))
			}
			e.mu.Unlock()
		}
	}
}

// leave records worker as gone from each key of idx.
func (e *exclusion) leave(id int, idx []int) {
	for _, i := range idx {
		e.inside[i].CompareAndSwap(int32(id+1), 0)
	}
}

// check fails t if two workers were ever inside on one key at once.
func (e *exclusion) check(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.overlaps > 0 {
		t.Errorf("mutual exclusion broken %d times; first: %s", e.overlaps, strings.Join(e.first, "; "))
	}
}

// A contender is a worker of a contended run: it takes a set of keys, or
// a single key, again and again until the run ends.
type contender struct {
	name string
	// set says whether it takes sets (ObtainAll and WithLocks, in turn)
	// or single keys (Obtain).
	set bool
	l   *locksmith.Locker
	// pick returns the indexes, in the run's keys, of what it takes next:
	// sorted, distinct, one for a single key. It is called by the
	// contender's goroutine only.
	pick func() []int

	// Written by the contender's goroutine, read once it has stopped.
	acquired int // acquisitions in the whole run
	late     int // acquisitions in the second half of the run
}

func (c *contender) kind() string {
	if c.set {
		return "set"
	}
	return "single"
}

// contendFor runs every contender in a goroutine of its own for d, on keys,
// each holding what it takes for contendedSection with ex watching, and
// returns once all have stopped. A call still waiting when the run ends
// returns ErrNotObtained, which ends its contender; any other error fails
// t.
func contendFor(t *testing.T, d time.Duration, keys []string, ex *exclusion, workers []*contender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	half := time.Now().Add(d / 2)
	var wg sync.WaitGroup
	for id, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := asCaller(ctx, w.kind())
			for round := 0; ctx.Err() == nil; round++ {
				idx := w.pick()
				set := make([]string, len(idx))
				for j, i := range idx {
					set[j] = keys[i]
				}
				hold := func() {
					ex.enter(w.name, id, idx)
					time.Sleep(contendedSection)
					ex.leave(id, idx)
					w.acquired++
					if time.Now().After(half) {
						w.late++
					}
				}
				var err error
				switch {
				case w.set && round%2 == 0:
					err = w.l.WithLocks(ctx, set, func(context.Context) error { hold(); return nil }, contendedRetry)
				default:
					var lk *locksmith.Lock
					if w.set {
						lk, err = w.l.ObtainAll(ctx, set, contendedRetry)
					} else {
						lk, err = w.l.Obtain(ctx, set[0], contendedRetry)
					}
					if err == nil {
						hold()
						err = lk.Release(context.WithoutCancel(ctx))
					}
				}
				if err != nil {
					if ctx.Err() != nil && errors.Is(err, locksmith.ErrNotObtained) {
						return // the run is over
					}
					t.Errorf("%s, round %d, keys %q: %v", w.name, round, set, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// contendedLockers returns n Lockers on srv, each on a client of its own
// counted by sent, warmed up (permissions checked, scripts loaded) so
// that the counts start with the run.
func contendedLockers(t *testing.T, srv *redistest.Server, n int, sent *sentByCaller) []*locksmith.Locker {
	t.Helper()
	lockers := make([]*locksmith.Locker, n)
	for i := range lockers {
		l := newLocker(t, newClient(t, srv.Options(), []redis.Hook{sent}), locksmith.WithTTL(contendedTTL))
		require.NoError(t, l.Check(t.Context()))
		warmUp(t, l)
		warmUpSet(t, l)
		lockers[i] = l
	}
	sent.reset()
	return lockers
}

// fairness is what a contended run shows of some of its workers.
type fairness struct {
	min, max, total int
	mean            float64
}

func fairnessOf(workers []*contender) fairness {
	f := fairness{min: workers[0].acquired}
	for _, w := range workers {
		f.min, f.max = min(f.min, w.acquired), max(f.max, w.acquired)
		f.total += w.acquired
	}
	f.mean = float64(f.total) / float64(len(workers))
	return f
}

func (f fairness) String() string {
	return fmt.Sprintf("fewest %d, most %d, mean %.1f, fewest/mean %.2f", f.min, f.max, f.mean, float64(f.min)/f.mean)
}

// reportContention logs what each worker acquired, the fairness of the
// run (the fewest acquisitions of a worker over the mean, of all workers
// and of each kind) and the requests sent per acquisition, by kind of
// caller, and returns the fairness of all workers and the requests per
// acquisition of the set workers.
func reportContention(t *testing.T, elapsed time.Duration, workers []*contender, sent *sentByCaller) (fairness, float64) {
	t.Helper()
	var lines []string
	byKind := map[string][]*contender{}
	for _, w := range workers {
		lines = append(lines, fmt.Sprintf("%s %d (%d in the second half)", w.name, w.acquired, w.late))
		byKind[w.kind()] = append(byKind[w.kind()], w)
	}
	all := fairnessOf(workers)
	t.Logf("run of %v: %d acquisitions; per worker: %s", elapsed.Round(time.Millisecond), all.total, strings.Join(lines, ", "))
	t.Logf("fairness of all workers: %v", all)
	counts := sent.counts()
	requests := 0
	for _, n := range counts {
		requests += n
	}
	perKind := []string{fmt.Sprintf("all %.2f (%d requests)", ratio(requests, all.total), requests)}
	for _, kind := range []string{"set", "single"} {
		if len(byKind[kind]) == 0 {
			continue
		}
		f := fairnessOf(byKind[kind])
		if len(byKind) > 1 {
			t.Logf("fairness of the %s workers: %v", kind, f)
		}
		perKind = append(perKind, fmt.Sprintf("%s %.2f (%d requests, %d acquisitions)", kind, ratio(counts[kind], f.total), counts[kind], f.total))
	}
	perKind = append(perKind, fmt.Sprintf("%d requests of no caller (background work)", counts["other"]))
	t.Logf("requests per acquisition: %s", strings.Join(perKind, ", "))
	return all, ratio(counts["set"], fairnessOf(byKind["set"]).total)
}

// maxSetRequests bounds the requests a set sends per acquisition under
// contention (an attempt that queues it and the release, plus the polls
// of a head at the end of its retry slots): a set that polled instead of
// waiting in the queues sent 5 to 7 in these runs, a queued one 2 to 3.5.
const maxSetRequests = 4.5

func ratio(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// TestSetsMakeProgress: 16 workers taking random sets of 2 to 4 of 8
// keys, alternately with WithLocks and ObtainAll, and 4 workers taking
// single keys of the same 8 with Obtain, spread over 4 Lockers (4
// processes), all keep acquiring for the whole run: no deadlock, no
// starvation, and never two inside on one key.
func TestSetsMakeProgress(t *testing.T) {
	const (
		setWorkers, singleWorkers, nLockers = 16, 4, 4
		// minAcquired is the fewest acquisitions a worker may make in the
		// run: a worker below it starved.
		minAcquired = 5
	)
	srv := redistest.Shared(t)
	run := fairnessRun(t, 5*time.Second)
	seed := fairnessSeed(t)
	keys := keySet(t, 8)
	var sent sentByCaller
	lockers := contendedLockers(t, srv, nLockers, &sent)

	var workers []*contender
	for i := range setWorkers + singleWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		w := &contender{l: lockers[i%nLockers], set: i < setWorkers}
		if w.set {
			w.name = fmt.Sprintf("set#%d", i)
			w.pick = func() []int {
				idx := rng.Perm(len(keys))[:2+rng.IntN(3)]
				slices.Sort(idx)
				return idx
			}
		} else {
			w.name = fmt.Sprintf("single#%d", i)
			w.pick = func() []int { return []int{rng.IntN(len(keys))} }
		}
		workers = append(workers, w)
	}
	ex := newExclusion(keys)
	start := time.Now()
	contendFor(t, run, keys, ex, workers)
	all, setRequests := reportContention(t, time.Since(start), workers, &sent)

	ex.check(t)
	if float64(all.min) < all.mean/2 {
		t.Errorf("the fewest acquisitions of a worker, %d, are under half the mean, %.1f", all.min, all.mean)
	}
	if setRequests > maxSetRequests {
		t.Errorf("sets sent %.2f requests per acquisition, want at most %.1f", setRequests, maxSetRequests)
	}
	for _, w := range workers {
		if w.acquired < minAcquired {
			t.Errorf("%s acquired %d times in %v, want at least %d: it starved", w.name, w.acquired, run, minAcquired)
		}
		if w.late == 0 {
			t.Errorf("%s acquired nothing in the second half of the run (%d in all): it stopped making progress", w.name, w.acquired)
		}
	}
}

// TestSetsDiningPhilosophers: 5 workers around 5 keys, each taking its
// two neighbours as a set, again and again: each makes at least half the
// mean number of acquisitions, with a Locker each (5 processes) and all
// on one Locker.
func TestSetsDiningPhilosophers(t *testing.T) {
	const philosophers = 5
	srv := redistest.Shared(t)
	run := fairnessRun(t, 2*time.Second)
	for _, tc := range []struct {
		name    string
		lockers int
	}{
		{"a Locker each", philosophers},
		{"one Locker", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := keySet(t, philosophers)
			var sent sentByCaller
			lockers := contendedLockers(t, srv, tc.lockers, &sent)
			var workers []*contender
			for i := range philosophers {
				forks := []int{i, (i + 1) % philosophers}
				slices.Sort(forks)
				workers = append(workers, &contender{
					name: fmt.Sprintf("philosopher#%d", i),
					set:  true,
					l:    lockers[i%len(lockers)],
					pick: func() []int { return forks },
				})
			}
			ex := newExclusion(keys)
			start := time.Now()
			contendFor(t, run, keys, ex, workers)
			f, setRequests := reportContention(t, time.Since(start), workers, &sent)

			ex.check(t)
			if setRequests > maxSetRequests {
				t.Errorf("sets sent %.2f requests per acquisition, want at most %.1f", setRequests, maxSetRequests)
			}
			if float64(f.min) < f.mean/2 {
				t.Errorf("the fewest acquisitions of a philosopher, %d, are under half the mean, %.1f", f.min, f.mean)
			}
		})
	}
}

// mentions is a hook that counts the commands whose arguments name key,
// once they are answered (or failed): the attempts of the only caller
// whose set holds key.
type mentions struct {
	key string
	n   atomic.Int64
}

func (m *mentions) DialHook(next redis.DialHook) redis.DialHook { return next }

func (m *mentions) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slices.Contains(cmd.Args(), any(m.key)) {
			m.n.Add(1)
		}
		return err
	}
}

func (m *mentions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// within reports whether cond becomes true within d, polling.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// served is a waiter of TestSetAndSingleServedInArrivalOrder that got
// what it waited for.
type served struct {
	name string
	lk   *locksmith.Lock
}

// TestSetAndSingleServedInArrivalOrder: while K is held, a single-key
// waiter W1 waits for K, then a set waiter S for {K, L}, then a
// single-key waiter W2 for K; released again and again, K goes to W1,
// then S, then W2. Each starts waiting once the one before it has its
// place: in K's handoff queue in Redis, which holds one entry per Locker,
// when the waiters are on Lockers of their own; in the Locker's queue for
// K when they share one (a Locker queues in Redis only the first of its
// waiters for a key, and the others behind it in arrival order, so a set
// that arrives while W1 waits on its Locker has to join that queue, as an
// Obtain call does). Should S take no place, the test says so and goes on,
// W2 starting after S's first attempt, to record the order it got.
func TestSetAndSingleServedInArrivalOrder(t *testing.T) {
	srv := redistest.Shared(t)
	for _, tc := range []struct {
		name      string
		oneLocker bool
	}{
		{"a Locker each", false},
		{"one Locker", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			keys := keySet(t, 2)
			k, l := keys[0], keys[1]
			inspector := newLocker(t, newClient(t, srv.Options(), nil))
			holder := holdLong(t, newClient(t, srv.Options(), nil), k)

			setAttempts := &mentions{key: l}
			waiters := func() *locksmith.Locker {
				return newLocker(t, newClient(t, srv.Options(), []redis.Hook{setAttempts}), locksmith.WithTTL(contendedTTL))
			}
			lockerOf := map[string]*locksmith.Locker{}
			var shared *locksmith.Locker
			if tc.oneLocker {
				shared = waiters()
			}
			for _, name := range []string{"W1", "S", "W2"} {
				if lockerOf[name] = shared; shared == nil {
					lockerOf[name] = waiters()
				}
			}
			queuedInRedis := func() int {
				st, err := inspector.Inspect(ctx, k)
				require.NoError(t, err)
				return st.Queued
			}
			// places counts the places taken in the queue that orders
			// the waiters.
			places := queuedInRedis
			if tc.oneLocker {
				places = func() int { return locksmith.QueuedWaiters(shared, plainNames(k).Channel) }
			}

			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			got := make(chan served, 3)
			t.Cleanup(func() {
				// Before the Lockers close: waiters still waiting give up,
				// and what any of them got late is released.
				cancel()
				wg.Wait()
				close(got)
				for s := range got {
					_ = s.lk.Release(context.WithoutCancel(ctx))
				}
			})
			wait := func(name string, obtain func(ctx context.Context) (*locksmith.Lock, error)) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lk, err := obtain(wctx)
					if err != nil {
						if wctx.Err() == nil {
							t.Errorf("%s: %v", name, err)
						}
						return
					}
					got <- served{name: name, lk: lk}
				}()
			}
			single := func(name string) {
				wait(name, func(ctx context.Context) (*locksmith.Lock, error) {
					return lockerOf[name].Obtain(ctx, k, locksmith.WithRetry(forever))
				})
			}

			single("W1")
			eventually(t, 5*time.Second, func() bool { return queuedInRedis() == 1 && places() == 1 },
				"W1 queued for %q", k)

			wait("S", func(ctx context.Context) (*locksmith.Lock, error) {
				return lockerOf["S"].ObtainAll(ctx, []string{k, l}, locksmith.WithRetry(forever))
			})
			eventually(t, 5*time.Second, func() bool { return setAttempts.n.Load() >= 1 }, "S made no attempt")
			if !within(5*time.Second, func() bool { return places() == 2 }) {
				t.Errorf("S, a set waiting for %q and %q, has no place in the queue of %q after 5s (%d waiters in the Locker's queue of W1, %d entries in Redis): ObtainAll does not queue; W2 comes after S's first attempt",
					k, l, k, locksmith.QueuedWaiters(lockerOf["W1"], plainNames(k).Channel), queuedInRedis())
			}
			afterS := places()

			single("W2")
			eventually(t, 5*time.Second, func() bool { return places() == afterS+1 }, "W2 queued for %q", k)

			want := []string{"W1", "S", "W2"}
			var order []string
			release := holder.Release
			for range want {
				require.NoError(t, release(ctx))
				select {
				case s := <-got:
					order = append(order, s.name)
					release = s.lk.Release
				case <-time.After(5 * time.Second):
					t.Errorf("after %v were served, nobody got %q within 5s of its release", order, k)
					release = nil
				}
				if release == nil {
					break
				}
			}
			if release != nil {
				require.NoError(t, release(ctx))
			}
			require.Equal(t, want, order, "the order K was served in")
		})
	}
}
