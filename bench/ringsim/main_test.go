package main

import (
	"math"
	"testing"
	"time"
)

// scenario12 is the set-up ringsim runs by default.
var scenario12 = config{hold: 2300 * time.Microsecond, hand: 100 * time.Microsecond, rtt: 100 * time.Microsecond,
	retry: time.Millisecond, gap: 250 * time.Microsecond, jitter: 0.5, length: 5 * time.Second, seed: 1}

// TestDisciplines checks the simulations against what must hold whatever
// the timings: no more sets held at once than fit in the ring, keys
// handed over in arrival order share evenly, and at the scenario's
// timings the poller holds more sets at once than strict arrival order
// does from any of a few starts, a claim docs/performance.md makes with
// them.
func TestDisciplines(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		cfg := scenario12
		cfg.seed = seed
		f, h, p := fifo(cfg), handoff(cfg), poll(cfg)
		for name, o := range map[string]outcome{"fifo": f, "handoff": h, "poll": p} {
			if o.held <= 0 || o.held > keys/2 {
				t.Errorf("seed %d: %s held %.2f sets at once, want within (0, %d]", seed, name, o.held, keys/2)
			}
		}
		for name, o := range map[string]outcome{"fifo": f, "handoff": h} {
			if o.fairness < 0.95 {
				t.Errorf("seed %d: %s fairness %.2f, want at least 0.95: keys handed over in arrival order", seed, name, o.fairness)
			}
		}
		if p.held <= f.held {
			t.Errorf("seed %d: poll held %.2f sets at once, fifo %.2f: want the poller ahead at these timings", seed, p.held, f.held)
		}
	}
}

// TestLittlesLaw checks each simulation's bookkeeping: the sets held at
// once on average are the rate times the mean time each is held (the hold,
// and for the poller half a round trip before it), whatever the
// discipline.
func TestLittlesLaw(t *testing.T) {
	cfg := scenario12
	for name, c := range map[string]struct {
		o    outcome
		hold time.Duration
	}{
		"fifo":    {fifo(cfg), cfg.hold},
		"handoff": {handoff(cfg), cfg.hold + cfg.rtt/2},
		"poll":    {poll(cfg), cfg.hold + cfg.rtt/2},
	} {
		want := c.o.rate * c.hold.Seconds()
		if math.Abs(c.o.held-want) > 0.02*want {
			t.Errorf("%s: held %.3f sets at once, but %.0f sets/s held %v each make %.3f", name, c.o.held, c.o.rate, c.hold, want)
		}
	}
}
