// Command ringsim computes, by discrete-event simulation, how many sets of
// scenario 12 (set16) can be held at once under three disciplines, to
// tell what the benchmark's figures can reach and why they vary from run
// to run:
//
//   - fifo: every key serves its waiters strictly in arrival order; a
//     waiter takes a key when it is first in that key's queue and the key
//     is free, and holds it while it waits for its other key;
//   - handoff: ObtainAll's discipline (see the function); a release hands
//     each key to the first waiter queued for it, in arrival order (issue
//     25 item 4), but a free key is open to any attempt;
//   - poll: a caller takes both keys at once when both are free, and
//     otherwise retries after about the retry interval (the one-script
//     set of the benchmark, polling every 1ms).
//
// The ring is that of the scenario: 8 keys, 16 workers, worker w takes keys
// w%8 and (w+1)%8, holds them -hold, releases both, and asks again after
// -gap. Handing a released key to the next waiter takes -hand; every
// duration varies by -jitter. Each discipline runs -seeds times from
// different random starts (arrival order settles into convoys that depend
// on how it started, so one run says little), and the mean and range are
// reported: the number of sets held at once (at most 4), the sets per
// second, and the fairness (fewest acquisitions of a worker over the
// mean).
//
//	cd bench && go run ./ringsim
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

func main() {
	var c config
	flag.DurationVar(&c.hold, "hold", 2300*time.Microsecond, "how long a set is held")
	flag.DurationVar(&c.hand, "hand", 100*time.Microsecond, "fifo: from a release to the next waiter holding the key")
	flag.DurationVar(&c.rtt, "rtt", 100*time.Microsecond, "poll: one attempt's round trip")
	flag.DurationVar(&c.retry, "retry", time.Millisecond, "poll: the mean pause before a retry (uniform over 0.5-1.5 times it)")
	flag.DurationVar(&c.gap, "gap", 250*time.Microsecond, "from a release to the worker's next request")
	flag.Float64Var(&c.jitter, "jitter", 0.5, "each hold, hand-over, gap and round trip is its flag's value times a uniform factor in 1 ± jitter/2")
	flag.DurationVar(&c.length, "length", 20*time.Second, "simulated time of each run")
	seeds := flag.Int("seeds", 8, "runs of each discipline, each from its own random start")
	flag.Parse()
	for _, d := range []struct {
		name string
		run  func(config) outcome
	}{{"fifo", fifo}, {"handoff", handoff}, {"poll", poll}} {
		var held, rate, fair []float64
		for seed := range *seeds {
			c.seed = uint64(seed) + 1
			o := d.run(c)
			held, rate, fair = append(held, o.held), append(rate, o.rate), append(fair, o.fairness)
		}
		fmt.Printf("%s, %d runs: held %s of 4, %s sets/s, fairness %s\n", d.name, *seeds, spread(held, "%.2f"), spread(rate, "%.0f"), spread(fair, "%.2f"))
	}
}

// spread formats the mean of vs and their range with format.
func spread(vs []float64, format string) string {
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	f := func(v float64) string { return fmt.Sprintf(format, v) }
	return f(sum/float64(len(vs))) + " (" + f(slices.Min(vs)) + "-" + f(slices.Max(vs)) + ")"
}

// config is one simulation's set-up; see the flags. seed starts its
// random numbers.
type config struct {
	hold, hand, rtt, retry, gap, length time.Duration
	jitter                              float64
	seed                                uint64
}

// outcome is what a simulation measured.
type outcome struct {
	held, rate, fairness float64
}

const (
	keys    = 8
	workers = 16
)

// pair returns worker w's keys.
func pair(w int) [2]int { return [2]int{w % keys, (w + 1) % keys} }

// event is something that happens to worker w at a time.
type event struct {
	at   time.Duration
	kind int // see the kinds of each simulation
	w    int
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].at < e[j].at }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// clock runs the events of a simulation in time order and integrates
// how many sets are held.
type clock struct {
	events
	now, last time.Duration
	held      int
	heldTime  float64 // sum of held × time, in held·ns
	acq       [workers]int
}

func (c *clock) at(e event) { heap.Push(&c.events, e) }

// next advances to the next event before end, and reports whether there
// was one.
func (c *clock) next(end time.Duration) (event, bool) {
	if c.Len() == 0 {
		return event{}, false
	}
	e := heap.Pop(&c.events).(event)
	if e.at > end {
		return event{}, false
	}
	c.heldTime += float64(c.held) * float64(e.at-c.last)
	c.now, c.last = e.at, e.at
	return e, true
}

func (c *clock) outcome() outcome {
	total := 0
	for _, n := range c.acq {
		total += n
	}
	mean := float64(total) / workers
	return outcome{
		held:     c.heldTime / float64(c.last),
		rate:     float64(total) / c.last.Seconds(),
		fairness: float64(slices.Min(c.acq[:])) / mean,
	}
}

// Event kinds. Each discipline has one of its own besides: see each.
const (
	ask     = iota // worker w asks for its set (polling: tries once)
	release        // worker w's hold ends
	news           // fifo: a key reaches w; handoff: w hears it was handed a key
)

// sim is one run of a discipline: its clock, set-up and random numbers.
type sim struct {
	clock
	cfg config
	r   *rand.Rand
}

// newSim starts a run of cfg with every worker asking within its first
// 10µs.
func newSim(cfg config) *sim {
	s := &sim{cfg: cfg, r: rand.New(rand.NewPCG(cfg.seed, 2))}
	for w := range workers {
		s.at(event{at: time.Duration(s.r.IntN(10000)), kind: ask, w: w})
	}
	return s
}

// after schedules an event of kind for w after d, jittered.
func (s *sim) after(d time.Duration, kind, w int) {
	s.at(event{at: s.now + jittered(s.cfg, s.r, d), kind: kind, w: w})
}

// won counts w's set as held from now, until a hold of d ends it.
func (s *sim) won(w int, d time.Duration) {
	s.held++
	s.acq[w]++
	s.after(d, release, w)
}

// released ends w's hold; w asks again after the gap.
func (s *sim) released(w int) {
	s.held--
	s.after(s.cfg.gap, ask, w)
}

// run hands each event of the run to handle, in time order, until the
// run's length, and returns the outcome.
func (s *sim) run(handle func(e event)) outcome {
	for {
		e, ok := s.next(s.cfg.length)
		if !ok {
			return s.outcome()
		}
		handle(e)
	}
}

// handFirst hands key k, when it is free, to the first worker queued for
// it, if any, who hears of it after -hand.
func (s *sim) handFirst(holder *[keys]int, queue *[keys][]event, k int) {
	if holder[k] < 0 && len(queue[k]) > 0 {
		holder[k] = popFirst(&queue[k])
		s.after(s.cfg.hand, news, holder[k])
	}
}

// jittered returns d times a uniform factor in 1 ± cfg.jitter/2.
func jittered(cfg config, r *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 + cfg.jitter*(r.Float64()-0.5)))
}

// noHolders returns the keys' holders, each -1: free.
func noHolders() [keys]int {
	var h [keys]int
	for k := range h {
		h[k] = -1
	}
	return h
}

// popFirst removes and returns the first of q's waiters, which it must
// have.
func popFirst(q *[]event) int {
	w := (*q)[0].w
	*q = (*q)[1:]
	return w
}

// fifo simulates keys that serve their waiters in arrival order.
func fifo(cfg config) outcome {
	s := newSim(cfg)
	holder := noHolders()
	queue := [keys][]event{} // arrivals, in order
	got := [workers]int{}
	return s.run(func(e event) {
		switch e.kind {
		case ask:
			for _, k := range pair(e.w) {
				queue[k] = append(queue[k], e)
				s.handFirst(&holder, &queue, k)
			}
		case news: // a key reached e.w
			if got[e.w]++; got[e.w] == 2 {
				s.won(e.w, cfg.hold)
			}
		case release:
			got[e.w] = 0
			for _, k := range pair(e.w) {
				holder[k] = -1
				s.handFirst(&holder, &queue, k)
			}
			s.released(e.w)
		}
	})
}

// handoff simulates ObtainAll's discipline (multi.go, multi_obtain.lua):
// an attempt takes every key at once when each is free or already the
// caller's, and otherwise takes nothing more and queues the caller, with
// the arrival of its first queued attempt, on every key it does not hold,
// free ones included. A release hands each key to the first entry of its
// queue, or frees it; a free key is open to any attempt. A caller handed
// a key attempts again once it hears of it (-hand, then half a round
// trip to the server) and keeps what it was handed.
func handoff(cfg config) outcome {
	s := newSim(cfg)
	holder := noHolders()
	queue := [keys][]event{} // entries by arrival (at) then worker
	arrival := [workers]time.Duration{}
	for w := range workers {
		arrival[w] = -1
	}
	enqueue := func(k int, e event) {
		i, found := slices.BinarySearchFunc(queue[k], e, func(a, b event) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.w - b.w
		})
		if !found {
			queue[k] = slices.Insert(queue[k], i, e)
		}
	}
	holding := [workers]bool{}
	attempt := func(w int) {
		if holding[w] {
			return // a second key's news, heard after the first's attempt won the set
		}
		p := pair(w)
		if (holder[p[0]] < 0 || holder[p[0]] == w) && (holder[p[1]] < 0 || holder[p[1]] == w) {
			for _, k := range p {
				holder[k] = w
				queue[k] = slices.DeleteFunc(queue[k], func(e event) bool { return e.w == w })
			}
			arrival[w] = -1
			holding[w] = true
			s.won(w, cfg.rtt/2+cfg.hold)
			return
		}
		if arrival[w] < 0 {
			arrival[w] = s.now
		}
		for _, k := range p {
			if holder[k] != w {
				enqueue(k, event{at: arrival[w], w: w})
			}
		}
	}
	return s.run(func(e event) {
		switch e.kind {
		case ask:
			attempt(e.w)
		case news: // e.w hears it was handed a key, and attempts again
			s.after(cfg.rtt/2, ask, e.w)
		case release:
			holding[e.w] = false
			for _, k := range pair(e.w) {
				holder[k] = -1
				s.handFirst(&holder, &queue, k)
			}
			s.released(e.w)
		}
	})
}

// poll simulates callers that take both keys when both are free, and
// retry otherwise.
func poll(cfg config) outcome {
	s := newSim(cfg)
	held := [keys]bool{}
	return s.run(func(e event) {
		p := pair(e.w)
		switch e.kind {
		case ask:
			if !held[p[0]] && !held[p[1]] {
				held[p[0]], held[p[1]] = true, true
				s.won(e.w, cfg.rtt/2+cfg.hold)
				return
			}
			pause := time.Duration(float64(cfg.retry) * (0.5 + s.r.Float64()))
			s.at(event{at: s.now + jittered(cfg, s.r, cfg.rtt) + pause, kind: ask, w: e.w})
		case release:
			held[p[0]], held[p[1]] = false, false
			s.released(e.w)
		}
	})
}
