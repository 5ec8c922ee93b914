//go:build linux

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// TestSoak runs workers (goroutines and a helper process, each reaching
// Redis through a proxy of its own) that take locks on a few keys, write
// under them to the fenced store, and sometimes stall past their TTL,
// and beside them workers (goroutines and a second helper process) that
// hold permits of a semaphore with fewer permits than they are, and
// workers (goroutines and a third helper process) that take read or write
// holds of a read-write lock, and candidates (goroutines and a fourth
// helper process) that campaign in an election and write with their
// terms' fences while they lead, and goroutines that take sets of two or
// three keys at once (ObtainAll, WithLocks), overlapping the lock
// workers' keys, or one key, and write to each key of a set with its
// fence, while
// faults are injected one after another: delays, blackholes and resets on
// a worker's connections, Redis restarts, CLIENT PAUSE, DEBUG SLEEP,
// SCRIPT FLUSH, and SIGSTOP of a helper process. At the end the history is
// checked (no more believed-valid windows at once than a key's limit,
// among the rest) and the figures are printed (run with -v to see them).
//
// It runs for -soak (20s by default, as in CI). Its random choices come
// from -seed, printed at the start: the same seed makes the same choices,
// though the timing of a run, and so its history, differs.
func TestSoak(t *testing.T) {
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak for %v with seed %d (go test ./faults -run Soak -soak=%v -seed=%d makes the same choices)",
		*soakFor, seed, *soakFor, seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo+1))) }

	srv := redistest.New(t)
	r := newRun()
	ss, err := r.store.Serve()
	require.NoError(t, err)
	defer ss.Close()
	admin := newClient(t, srv.Addr, func(o *redis.Options) { o.ReadTimeout = 5 * time.Second })
	keys := []string{"soak:a", "soak:b"}
	// A semaphore with two permits for four workers (three goroutines and
	// a helper process).
	const semKey, semLimit = "soak:sem", 2
	// A read-write lock for four workers (three goroutines and a helper
	// process), each a reader or a writer from one hold to the next.
	const rwKey = "soak:rw"
	// An election for three candidates (two goroutines and a helper
	// process).
	const electKey = "soak:elect"
	// Sets of the lock workers' keys and one more, for two goroutines.
	setKeys := append(slices.Clone(keys), "soak:c")

	const goroutines, semGoroutines, rwGoroutines, electGoroutines, setGoroutines = 5, 3, 3, 2, 2
	workers := goroutines + semGoroutines + rwGoroutines + electGoroutines + setGoroutines
	proxies := make([]*faults.Proxy, workers+4)
	for i := range proxies {
		proxies[i] = newProxy(t, srv.Addr)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	for i := range workers {
		cfg := workerConfig{Name: fmt.Sprintf("goroutine-%d", i), Addr: proxies[i].Addr(), Keys: keys,
			Seed: rnd.Uint64(), ContextTimeouts: i%2 == 0, PauseChance: 0.03}
		switch {
		case i >= goroutines+semGoroutines+rwGoroutines+electGoroutines:
			cfg.Name, cfg.Keys, cfg.Sets = fmt.Sprintf("set-goroutine-%d", i-goroutines-semGoroutines-rwGoroutines-electGoroutines), setKeys, true
		case i >= goroutines+semGoroutines+rwGoroutines:
			cfg.Name, cfg.Keys, cfg.Elect = fmt.Sprintf("elect-goroutine-%d", i-goroutines-semGoroutines-rwGoroutines), []string{electKey}, true
		case i >= goroutines+semGoroutines:
			cfg.Name, cfg.Keys, cfg.RW = fmt.Sprintf("rw-goroutine-%d", i-goroutines-semGoroutines), []string{rwKey}, true
		case i >= goroutines:
			cfg.Name, cfg.Keys, cfg.Limit = fmt.Sprintf("sem-goroutine-%d", i-goroutines), []string{semKey}, semLimit
		}
		client := workerClient(cfg)
		t.Cleanup(func() { _ = client.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			runWorker(ctx, cfg, client, r.hist, r.clock, r.store)
		}()
	}
	helpers := []*helperProc{
		startHelper(t, r, helperConfig{Mode: modeSoak, Store: ss.Addr(), Name: "process",
			Worker: workerConfig{Name: "process", Addr: proxies[len(proxies)-4].Addr(), Keys: keys,
				Seed: rnd.Uint64(), ContextTimeouts: true, PauseChance: 0.03}}),
		startHelper(t, r, helperConfig{Mode: modeSoak, Store: ss.Addr(), Name: "sem-process",
			Worker: workerConfig{Name: "sem-process", Addr: proxies[len(proxies)-3].Addr(), Keys: []string{semKey},
				Limit: semLimit, Seed: rnd.Uint64(), ContextTimeouts: true, PauseChance: 0.03}}),
		startHelper(t, r, helperConfig{Mode: modeSoak, Store: ss.Addr(), Name: "rw-process",
			Worker: workerConfig{Name: "rw-process", Addr: proxies[len(proxies)-2].Addr(), Keys: []string{rwKey},
				RW: true, Seed: rnd.Uint64(), ContextTimeouts: true, PauseChance: 0.03}}),
		startHelper(t, r, helperConfig{Mode: modeSoak, Store: ss.Addr(), Name: "elect-process",
			Worker: workerConfig{Name: "elect-process", Addr: proxies[len(proxies)-1].Addr(), Keys: []string{electKey},
				Elect: true, Seed: rnd.Uint64(), ContextTimeouts: true, PauseChance: 0.03}}),
	}

	kinds := []string{"delay", "blackhole", "reset", "redis-restart", "client-pause", "debug-sleep", "script-flush", "sigstop"}
	end := time.Now().Add(*soakFor)
	for time.Now().Add(time.Second).Before(end) {
		time.Sleep(between(100*time.Millisecond, 600*time.Millisecond))
		kind := kinds[rnd.IntN(len(kinds))]
		start := time.Now()
		losesData := false
		switch kind {
		case "delay":
			p := proxies[rnd.IntN(len(proxies))]
			dir := faults.Direction(rnd.IntN(2))
			p.SetDelay(dir, between(50*time.Millisecond, 900*time.Millisecond))
			time.Sleep(between(300*time.Millisecond, 1500*time.Millisecond))
			p.SetDelay(dir, 0)
		case "blackhole":
			p := proxies[rnd.IntN(len(proxies))]
			p.Blackhole(true)
			time.Sleep(between(200*time.Millisecond, 1500*time.Millisecond))
			p.Blackhole(false)
		case "reset":
			proxies[rnd.IntN(len(proxies))].Reset()
		case "redis-restart":
			losesData = true
			require.NoError(t, srv.Restart())
		case "client-pause":
			d := between(100*time.Millisecond, time.Second)
			require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
			time.Sleep(d)
		case "debug-sleep":
			d := between(100*time.Millisecond, time.Second)
			require.NoError(t, admin.Do(ctx, "DEBUG", "SLEEP", d.Seconds()).Err())
		case "script-flush":
			require.NoError(t, admin.ScriptFlush(ctx).Err())
		case "sigstop":
			helper := helpers[rnd.IntN(len(helpers))]
			helper.signal(syscall.SIGSTOP)
			time.Sleep(between(200*time.Millisecond, 1500*time.Millisecond))
			helper.signal(syscall.SIGCONT)
			kind += " " + helper.cfg.Name
		}
		r.faultSpan(kind, start, time.Now(), losesData)
	}

	stop()
	for _, p := range helpers {
		p.stop()
	}
	wg.Wait()
	for _, p := range helpers {
		require.NoError(t, p.wait(20*time.Second), "the helper process %s failed", p.cfg.Name)
	}
	rep := r.checkOps(t, r.hist.Ops())
	byHolder := make(map[string]int)
	for _, op := range r.hist.Ops() {
		if op.Kind == faults.KindObtain && op.Outcome == faults.OutcomeOK {
			byHolder[op.Holder]++
		}
	}
	t.Logf("soak figures (seed %d, %v):\n%s\nacquisitions by worker: %v", seed, *soakFor, rep.Summary(), byHolder)
	require.Positive(t, rep.Accepted)
	require.Len(t, byHolder, len(proxies), "a worker never got a lock or a permit")
	require.Equal(t, semLimit, rep.Limits[semKey])
	require.LessOrEqual(t, rep.Peak[semKey], semLimit)
	require.True(t, rep.ReadWrite[rwKey])
	var reads, writes int
	for _, op := range r.hist.Ops() {
		if op.Kind == faults.KindObtain && op.Outcome == faults.OutcomeOK && op.Key == rwKey {
			if op.Access == faults.AccessWrite {
				writes++
			} else {
				reads++
			}
		}
	}
	t.Logf("read-write lock %q: %d read holds, %d write holds, most holders at once %d", rwKey, reads, writes, rep.Peak[rwKey])
	require.Positive(t, reads)
	require.Positive(t, writes)
	var terms, leaderWrites, refused int
	for _, op := range r.hist.Ops() {
		switch {
		case op.Key != electKey:
		case op.Kind == faults.KindObtain && op.Outcome == faults.OutcomeOK:
			terms++
		case op.Kind == faults.KindWrite:
			leaderWrites++
			if op.Outcome != faults.OutcomeAccepted {
				refused++
			}
		}
	}
	t.Logf("election %q: %d terms, most believed leaders at once %d, %d fenced writes by leaders (%d refused)",
		electKey, terms, rep.Peak[electKey], leaderWrites, refused)
	require.Positive(t, terms)
	require.Equal(t, 1, rep.Peak[electKey], "the most believed leaders at once")
	setWrites := 0
	for _, op := range r.hist.Ops() {
		if op.Kind == faults.KindWrite && strings.HasPrefix(op.Holder, "set-goroutine-") {
			setWrites++
		}
	}
	t.Logf("sets of keys: %d taken, %d fenced writes by the set workers, most holders at once of %v: %d, %d, %d",
		rep.Sets, setWrites, setKeys, rep.Peak[setKeys[0]], rep.Peak[setKeys[1]], rep.Peak[setKeys[2]])
	require.Positive(t, rep.Sets)
	for _, k := range setKeys {
		require.Equal(t, 1, rep.Peak[k], "the most holders at once of %q", k)
	}
}
