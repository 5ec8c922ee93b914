//go:build linux

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// Sets of locks waiting in the handoff queues while the network fails
// under them: TestSetsUnderNetworkFaults. Three sets and singles contend
// for keys a, b and c: through a proxy, V1 takes {a, b} (ObtainAll, or
// WithLocks every other call), V2 takes {a, b, c} and W takes b alone;
// straight to Redis, S takes {b, c}, X takes a and Y takes c. Each loops:
// it waits for its keys (a retry strategy, so it queues), checks on the
// server that it holds every one, writes each key's record in the fenced
// store with that key's fence, holds for a moment and releases. Then
//
//  1. a blocker B takes b, so that the sets queue behind it, and once V2
//     waits in b's queue the proxy's fault starts; B releases, handing b
//     on to a waiter whose replies the fault is withholding;
//  2. the fault ends, and every worker must get its keys again (no set
//     stuck, no key left to block them);
//  3. the workers stop, and on the server, read by a client of its own:
//     no lock key is held by a token no holder holds (what a call that
//     returned an error left behind), no queue holds an entry (every
//     call has returned: a winner's entries went with its win, a loser's
//     with its withdrawal), and a new set takes all three keys at once,
//     with fences above every fence given before;
//  4. the history is checked: no two windows at once on any key, a set's
//     or a single key's, fences in order on each key, and every write
//     under a window accepted.
//
// The calls behind the proxy give up after 0.3-2s, often while the fault
// is on. The faults: "delay" holds every reply back past the validity of
// the TTL, so a set handed its last key hears of it too late
// (ErrLockLost, and the withdrawal of what it holds); "blackhole" stops
// the network for longer than the TTL, so the keys handed to a waiting
// set expire unrenewed, and then delivers all it held back, late, the
// requests of calls that gave up meanwhile included; "blackhole+reset"
// drops all that instead, with the connections; "reset-after-request" lets a request of a waiting set
// run on the server and drops its reply with the connection, again and
// again, whatever request it is (an attempt, a renewal, a release, a
// withdrawal).
func TestSetsUnderNetworkFaults(t *testing.T) {
	srv := redistest.New(t)
	for _, fenced := range []bool{true, false} {
		for _, kind := range []string{"delay", "blackhole", "blackhole+reset", "reset-after-request"} {
			name := fmt.Sprintf("%s/fenced=%v", kind, fenced)
			t.Run(name, func(t *testing.T) {
				setsUnderFault(t, srv, kind, fenced, strings.NewReplacer("/", "-", "=", "-", "+", "-").Replace(name))
			})
		}
	}
}

// A setWorker takes keys, a set or one key, in a loop (see
// TestSetsUnderNetworkFaults).
type setWorker struct {
	name    string
	keys    []string
	l       *locksmith.Locker
	through bool // through the proxy
	opts    []locksmith.Option
}

// setCall is the outcome of one call of a setWorker.
type setCall struct {
	worker       string
	start, end   time.Time
	err          error
	token        string
	releaseErr   error
	unverifiable bool // the check that it held its keys came after its Deadline
}

func setsUnderFault(t *testing.T, srv *redistest.Server, kind string, fenced bool, prefix string) {
	ctx := t.Context()
	p := newProxy(t, srv.Addr)
	r := newRun()
	raw := newClient(t, srv.Addr)
	const ttl = 500 * time.Millisecond
	a, b, c := prefix+":a", prefix+":b", prefix+":c"
	all := []string{a, b, c}
	base := []locksmith.Option{locksmith.WithTTL(ttl)}
	if fenced {
		base = append(base, locksmith.WithFencing())
	}
	opts := func(more ...locksmith.Option) []locksmith.Option {
		return append(append([]locksmith.Option{}, base...), more...)
	}
	retry := locksmith.WithRetry(locksmith.LinearBackoff(20 * time.Millisecond))
	limited := locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(20*time.Millisecond), 40))
	locker := func(addr string, contextTimeouts bool) *locksmith.Locker {
		return newLocker(t, newClient(t, addr, func(o *redis.Options) { o.ContextTimeoutEnabled = contextTimeouts }))
	}
	workers := []setWorker{
		{name: "V1", keys: []string{a, b}, l: locker(p.Addr(), true), through: true, opts: opts(limited)},
		{name: "V2", keys: []string{a, b, c}, l: locker(p.Addr(), false), through: true, opts: opts(retry)},
		{name: "W", keys: []string{b}, l: locker(p.Addr(), true), through: true, opts: opts(retry)},
		{name: "S", keys: []string{b, c}, l: locker(srv.Addr, true), opts: opts(retry)},
		{name: "X", keys: []string{a}, l: locker(srv.Addr, true), opts: opts(retry)},
		{name: "Y", keys: []string{c}, l: locker(srv.Addr, true), opts: opts(limited)},
	}
	names := make(map[string]locksmith.Keys)
	for _, k := range all {
		n, err := workers[0].l.Keys(k)
		require.NoError(t, err)
		names[k] = n
	}
	// Load the scripts and open the connections first, so that the fault
	// meets the sets' waiting, not their first round trips.
	for _, w := range workers {
		lk, err := w.l.ObtainAll(ctx, []string{prefix + ":warm-up-1", prefix + ":warm-up-2"}, base...)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}

	var (
		mu      sync.Mutex // guards calls and wrong
		calls   []setCall
		wrong   []string // successes that did not hold their keys on the server
		stop    = make(chan struct{})
		running sync.WaitGroup // the workers
	)
	record := func(c setCall) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
	}
	// since returns, by worker, how many calls that started after at
	// succeeded.
	succeededSince := func(at time.Time) map[string]int {
		mu.Lock()
		defer mu.Unlock()
		n := make(map[string]int)
		for _, c := range calls {
			if c.err == nil && c.start.After(at) {
				n[c.worker]++
			}
		}
		return n
	}
	for wi, w := range workers {
		running.Add(1)
		go func() {
			defer running.Done()
			rnd := rand.New(rand.NewPCG(uint64(wi), uint64(len(prefix))))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tr := r.tracker(fmt.Sprintf("%s.%d", w.name, i))
				tr.unfenced = !fenced
				record(runSetCall(ctx, tr, w, i, raw, r.store, fenced, rnd, &mu, &wrong))
				if i >= 400 {
					t.Errorf("%s made %d calls: the test did not stop it", w.name, i)
					return
				}
			}
		}()
	}
	stopWorkers := func() {
		close(stop)
		done := make(chan struct{})
		go func() { running.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the workers did not stop")
		}
	}
	defer func() {
		select {
		case <-stop:
		default:
			stopWorkers()
		}
	}()

	// 1. B blocks b; once V2 waits in b's queue, the fault starts, and
	// B's release hands b on.
	btr := r.tracker("B")
	btr.unfenced = !fenced
	bl := locker(srv.Addr, true)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	hb, err := btr.obtain(bctx, bl, b, opts(retry)...)
	cancel()
	require.NoError(t, err)
	var v2Token string
	require.Eventually(t, func() bool {
		for _, m := range raw.ZRange(ctx, names[b].Queue, 0, -1).Val() {
			if strings.HasPrefix(m, "a:") && strings.HasSuffix(m, "/3") {
				v2Token = m[strings.LastIndexByte(m, ' ')+1:]
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "V2 never queued for b")

	start := time.Now()
	var endFault func()
	switch kind {
	case "delay":
		// Past the validity of the TTL: a set handed its keys hears of
		// it too late.
		p.SetDelay(faults.ToClient, ttl+200*time.Millisecond)
		endFault = func() {
			time.Sleep(1500 * time.Millisecond)
			p.SetDelay(faults.ToClient, 0)
		}
	case "blackhole":
		p.Blackhole(true)
		endFault = func() {
			time.Sleep(ttl + 300*time.Millisecond) // a partition longer than the TTL
			p.Blackhole(false)
		}
	case "blackhole+reset":
		p.Blackhole(true)
		endFault = func() {
			time.Sleep(ttl + 300*time.Millisecond) // a partition longer than the TTL
			p.Reset()                              // what was held back is lost
			p.Blackhole(false)
		}
	case "reset-after-request":
		// Whatever a waiting set sends, with its token: first V2's, then
		// any set's through the proxy (their tokens end in /2 or /3).
		fired := p.ResetAfterRequest([]byte(v2Token))
		endFault = func() {
			n := 0
			window := time.After(2 * time.Second)
			for matches := [][]byte{[]byte("/2\r\n"), []byte("/3\r\n")}; ; {
				select {
				case <-fired:
					n++
					fired = p.ResetAfterRequest(matches[n%2])
					continue
				case <-window:
				}
				break
			}
			p.ResetAfterRequest([]byte("\x00not a request\x00")) // disarmed
			t.Logf("replies dropped after their requests ran: %d", n)
			require.Positive(t, n, "no request of a waiting set was cut off")
		}
	}
	require.NoError(t, btr.release(ctx, hb))
	endFault()
	p.Heal()
	healed := time.Now()
	r.faultSpan(kind, start, healed, false)

	// 2. Every worker gets its keys again.
	for deadline := time.Now().Add(20 * time.Second); len(succeededSince(healed)) < len(workers); {
		if time.Now().After(deadline) {
			t.Fatalf("not every worker got its keys within 20s of the fault's end: successes by worker %v", succeededSince(healed))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// 3. Nothing is left on the server.
	stopWorkers()
	mu.Lock()
	defer mu.Unlock()
	for _, w := range wrong {
		t.Error(w)
	}
	mayHold := make(map[string]bool) // tokens whose Release did not say
	outcomes := make(map[string]map[string]int)
	unverifiable := 0
	for _, c := range calls {
		o := outcome(c.err)
		if outcomes[c.worker] == nil {
			outcomes[c.worker] = make(map[string]int)
		}
		outcomes[c.worker][o]++
		if c.err == nil && c.releaseErr != nil && !errors.Is(c.releaseErr, locksmith.ErrNotHeld) {
			mayHold[c.token] = true
		}
		if c.unverifiable {
			unverifiable++
		}
	}
	t.Logf("calls by worker and outcome: %v; successes checked after their Deadline (not verified): %d; releases unanswered: %d",
		outcomes, unverifiable, len(mayHold))
	now, err := raw.Time(ctx).Result()
	require.NoError(t, err)
	for _, k := range all {
		tok, err := raw.Get(ctx, names[k].Lock).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatal(err)
		case !mayHold[tok]:
			t.Errorf("key %q is held by %q, which no holder holds: left by a call that returned an error", k, tok)
		}
		entries, err := raw.ZRangeWithScores(ctx, names[k].Queue, 0, -1).Result()
		require.NoError(t, err)
		for _, e := range entries {
			m := e.Member.(string)
			if m == "h" {
				continue // bookkeeping, not an entry
			}
			state := "live"
			if strings.HasPrefix(m, "l:") && -e.Score <= float64(now.UnixMilli()) {
				state = "lapsed"
			}
			t.Errorf("the queue of %q holds %q (%s, score %.0f) after every call returned", k, m, state, e.Score)
		}
	}
	// A new set takes the three keys at once (waiting out only the
	// keys of releases that went unanswered), fences above all before.
	check := r.tracker("check")
	check.unfenced = !fenced
	cctx, cancel := context.WithTimeout(ctx, ttl+5*time.Second)
	defer cancel()
	more := []locksmith.Option{locksmith.WithRetry(locksmith.NoRetry())}
	if len(mayHold) > 0 {
		more = []locksmith.Option{retry}
	}
	sh, err := check.obtainAll(cctx, bl, all, opts(more...)...)
	require.NoError(t, err, "the keys are not free after every call returned")
	if fenced {
		for _, k := range all {
			for _, op := range r.hist.Ops() {
				if op.Kind == faults.KindObtain && op.Key == k && op.Outcome == faults.OutcomeOK && op.Holder != "check" {
					require.Greater(t, sh.lk.FenceOf(k), op.Fence, "key %q: a fence not above %s's", k, op.Holder)
				}
			}
		}
		require.True(t, sh.write(r.store))
	}
	require.NoError(t, check.releaseSet(ctx, sh))

	// 4. The history.
	rep := r.check(t)
	t.Logf("figures:\n%s", rep.Summary())
	require.Positive(t, rep.Sets)
}

// runSetCall makes call i of w, recorded by tr, and returns its outcome:
// on success it checks on the server (raw) that the call holds every key,
// writes each key's record in store with its fence when fenced, holds
// for a moment and releases. A success that does not hold its keys is
// added to wrong, under mu.
func runSetCall(ctx context.Context, tr *tracker, w setWorker, i int, raw *redis.Client, store *faults.Store,
	fenced bool, rnd *rand.Rand, mu *sync.Mutex, wrong *[]string) setCall {
	res := setCall{worker: w.name, start: time.Now()}
	var sh *setHolding
	work := func(lctx context.Context) {
		res.token = sh.lk.Token()
		vals, err := raw.MGet(ctx, w.keys...).Result()
		switch {
		case err != nil:
			mu.Lock()
			*wrong = append(*wrong, fmt.Sprintf("%s: reading its keys: %v", tr.name, err))
			mu.Unlock()
		case !time.Now().Before(sh.lk.Deadline()):
			res.unverifiable = true
		default:
			for j, v := range vals {
				if v != sh.lk.Token() {
					mu.Lock()
					*wrong = append(*wrong, fmt.Sprintf("%s: returned success, but key %q holds %v, not its token %q",
						tr.name, w.keys[j], v, sh.lk.Token()))
					mu.Unlock()
				}
			}
		}
		if fenced && lctx.Err() == nil {
			sh.write(store)
		}
		select {
		case <-lctx.Done():
		case <-time.After(time.Duration(5+rnd.IntN(30)) * time.Millisecond):
		}
	}
	// The calls behind the proxy give up at random, often while the
	// fault is on.
	giveUp := 2 * time.Second
	if w.through {
		giveUp = time.Duration(300+rnd.IntN(1700)) * time.Millisecond
	}
	octx, cancel := context.WithTimeout(ctx, giveUp)
	defer cancel()
	if len(w.keys) > 1 && w.name == "V1" && i%2 == 1 {
		// Through WithLocks, which leases and releases by itself.
		var stop time.Time
		res.err = w.l.WithLocks(octx, w.keys, func(lctx context.Context) error {
			sh = tr.obtainedSet(w.keys, res.start, time.Now(), locksmith.LockFromContext(lctx), nil)
			sh.watch(lctx)
			work(lctx)
			stop = time.Now()
			return nil
		}, w.opts...)
		if sh == nil {
			tr.obtainedSet(w.keys, res.start, time.Now(), nil, res.err)
		} else {
			sh.end(stop, "released")
			for _, h := range sh.parts {
				tr.recordRelease(h, stop, time.Now(), res.err)
			}
			// A Release that failed is in WithLocks' error; the
			// acquisition succeeded.
			res.releaseErr, res.err = res.err, nil
		}
		res.end = time.Now()
		return res
	}
	if len(w.keys) > 1 {
		sh, res.err = tr.obtainAll(octx, w.l, w.keys, w.opts...)
	} else {
		var h *holding
		h, res.err = tr.obtain(octx, w.l, w.keys[0], w.opts...)
		sh = h.alone()
	}
	cancel()
	if res.err == nil {
		work(sh.lease(ctx))
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res.releaseErr = tr.releaseSet(rctx, sh)
		cancel()
	}
	res.end = time.Now()
	return res
}
