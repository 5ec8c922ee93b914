package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSetKeys checks which keys each worker of the set scenarios takes:
// consecutive keys of the ring, wrapping round, sorted as ObtainAll sorts
// them, with the ring index of each beside it, all in one hash tag.
func TestSetKeys(t *testing.T) {
	for _, c := range []struct {
		id, size, pool int
		slots          []int
	}{
		{id: 0, size: 2, pool: 2, slots: []int{0, 1}},
		{id: 0, size: 2, pool: 8, slots: []int{0, 1}},
		{id: 3, size: 2, pool: 8, slots: []int{3, 4}},
		{id: 7, size: 2, pool: 8, slots: []int{0, 7}},  // wraps round, sorted
		{id: 8, size: 2, pool: 8, slots: []int{0, 1}},  // the same pair as worker 0
		{id: 15, size: 2, pool: 8, slots: []int{0, 7}}, // and as worker 7
		{id: 9, size: 3, pool: 10, slots: []int{0, 1, 9}},
		{id: 0, size: 3, pool: 2, slots: []int{0, 1}}, // a key counts once
	} {
		keys, slots := setKeys(c.id, c.size, c.pool)
		if !slices.Equal(slots, c.slots) {
			t.Errorf("setKeys(%d, %d, %d) slots = %v, want %v", c.id, c.size, c.pool, slots, c.slots)
		}
		if !slices.IsSorted(keys) {
			t.Errorf("setKeys(%d, %d, %d) keys = %q, not sorted", c.id, c.size, c.pool, keys)
		}
		for i, k := range keys {
			if want := setKeyName(slots[i]); k != want {
				t.Errorf("setKeys(%d, %d, %d) key %d = %q, want %q", c.id, c.size, c.pool, i, k, want)
			}
			if !strings.HasPrefix(k, setKeyTag+":") {
				t.Errorf("key %q is outside the hash tag %s", k, setKeyTag)
			}
		}
	}
}

// TestSetGate checks that a set entering beside another that holds one of
// its keys counts a violation for each key they share, and that disjoint
// sets count none.
func TestSetGate(t *testing.T) {
	g := newSetGate(8)
	steps := []struct {
		slots []int
		enter bool
		ok    bool
	}{
		{slots: []int{0, 1}, enter: true, ok: true},
		{slots: []int{2, 3}, enter: true, ok: true},  // disjoint
		{slots: []int{1, 2}, enter: true, ok: false}, // shares 1 and 2: two violations
		{slots: []int{1, 2}, enter: false},
		{slots: []int{0, 1}, enter: false},
		{slots: []int{0, 7}, enter: true, ok: true},  // 0 is free again
		{slots: []int{3, 4}, enter: true, ok: false}, // shares 3: one violation
	}
	for i, s := range steps {
		if !s.enter {
			g.leave(s.slots)
			continue
		}
		if ok := g.enter(s.slots); ok != s.ok {
			t.Errorf("step %d: enter(%v) = %v, want %v", i, s.slots, ok, s.ok)
		}
	}
	if v := g.violations.Load(); v != 3 {
		t.Errorf("violations = %d, want 3", v)
	}
	want := []int64{1, 0, 1, 2, 1, 0, 0, 1}
	for i := range g.inside {
		if got := g.inside[i].Load(); got != want[i] {
			t.Errorf("inside[%d] = %d, want %d", i, got, want[i])
		}
	}
}

// fakeHeld records its release into a shared log.
type fakeHeld struct {
	name string
	log  *[]string
	err  error
}

func (h *fakeHeld) release(context.Context) error {
	*h.log = append(*h.log, h.name)
	return h.err
}

// TestHeldSetRelease checks that a heldSet releases every part, the last
// taken first, even when one fails, reports every failure, and is empty
// and reusable afterwards.
func TestHeldSetRelease(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	hs := heldSet{parts: []held{&fakeHeld{name: "a", log: &log}, &fakeHeld{name: "b", log: &log, err: boom}, &fakeHeld{name: "c", log: &log}}}
	if err := hs.release(t.Context()); !errors.Is(err, boom) {
		t.Errorf("release = %v, want %v", err, boom)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(log, want) {
		t.Errorf("released %q, want %q", log, want)
	}
	if len(hs.parts) != 0 {
		t.Errorf("%d parts left after release, want 0", len(hs.parts))
	}
	if err := hs.release(t.Context()); err != nil {
		t.Errorf("release of an empty set = %v, want nil", err)
	}
}

// TestFairness checks the fewest acquisitions over the mean.
func TestFairness(t *testing.T) {
	for _, c := range []struct {
		perWorker []int64
		want      float64
	}{
		{perWorker: []int64{10, 10, 10, 10}, want: 1},
		{perWorker: []int64{5, 15}, want: 0.5},
		{perWorker: []int64{0, 20}, want: 0},
		{perWorker: []int64{0, 0}, want: -1},
		{perWorker: nil, want: -1},
	} {
		if got := fairness(c.perWorker); got != c.want {
			t.Errorf("fairness(%v) = %v, want %v", c.perWorker, got, c.want)
		}
	}
}

// TestRatioTable checks the table of every row's rate over every other's:
// one column per result, 1.00x on the diagonal, and no ratio for a failed
// or empty result.
func TestRatioTable(t *testing.T) {
	fake := func(l lib, ops int64, err error) *result {
		return &result{lib: l, elapsed: time.Second, tally: tally{ops: ops}, lat: new(hist), err: err}
	}
	results := []*result{
		fake(setScriptBase{}, 100, nil),
		fake(smithSetLib{}, 150, nil),
		fake(smithPairLib{}, 0, nil),
		fake(redislockPairLib{}, 300, errors.New("failed")),
	}
	tab := ratioTable("ratios", results)
	wantHeader := []string{"row / column", "one-script SET NX set (polling)", "locksmith ObtainAll", "locksmith two Obtain, sorted", "redislock two Obtain, sorted"}
	if !slices.Equal(tab.header, wantHeader) {
		t.Errorf("header = %q, want %q", tab.header, wantHeader)
	}
	want := [][]string{
		{"one-script SET NX set (polling)", "1.00x", "0.67x", "-", "-"},
		{"locksmith ObtainAll", "1.50x", "1.00x", "-", "-"},
		{"locksmith two Obtain, sorted", "-", "-", "-", "-"},
		{"redislock two Obtain, sorted", "-", "-", "-", "-"},
	}
	for i, row := range want {
		if !slices.Equal(tab.rows[i], row) {
			t.Errorf("row %d = %q, want %q", i, tab.rows[i], row)
		}
	}
}

// TestSetLibraries checks the rows of each set scenario: the one-script
// baseline first, and the two one-script rows, the same when trying once,
// only once in the uncontended table.
func TestSetLibraries(t *testing.T) {
	names := func(libs []lib) []string {
		var out []string
		for _, l := range libs {
			out = append(out, l.name())
		}
		return out
	}
	for _, wait := range []bool{false, true} {
		libs := setLibraries(time.Millisecond, wait)
		if !isBaseline(libs[0]) {
			t.Errorf("wait=%v: first row %q is not the baseline", wait, libs[0].name())
		}
		for _, l := range libs[1:] {
			if isBaseline(l) {
				t.Errorf("wait=%v: %q is a second baseline", wait, l.name())
			}
		}
		got := names(libs)
		twice := slices.Contains(got, "one-script SET NX set, 100ms x3")
		if twice != wait {
			t.Errorf("wait=%v: rows %q", wait, got)
		}
		if n := len(got); n != 4+boolInt(wait) {
			t.Errorf("wait=%v: %d rows, want %d", wait, n, 4+boolInt(wait))
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// primeRecorder is a setLocker that records how it was primed.
type primeRecorder struct{ calls []string }

func (p *primeRecorder) obtain(_ context.Context, key string) (held, error) {
	p.calls = append(p.calls, "obtain "+key)
	return &fakeHeld{name: key, log: new([]string)}, nil
}

func (p *primeRecorder) obtainSet(_ context.Context, keys []string, into *heldSet) error {
	p.calls = append(p.calls, "obtainSet "+strings.Join(keys, " "))
	into.parts = append(into.parts, &fakeHeld{name: "set", log: new([]string)})
	return nil
}

func (p *primeRecorder) close() {}

// TestPrime checks that an instance is primed with a set only in a set
// scenario: a locksmith row takes sets too, but in the lock scenarios it
// may run where sets are refused (a quorum).
func TestPrime(t *testing.T) {
	for _, c := range []struct {
		sc   scenario
		want string
	}{
		{sc: scenarios[0], want: "obtain bench:prime:1"},
		{sc: scenario{id: "set2", set: 2, pool: 2, workers: 1, lockers: 1}, want: "obtainSet {bench:prime:1}:a {bench:prime:1}:b"},
	} {
		var p primeRecorder
		if err := prime(t.Context(), &p, c.sc, 1); err != nil {
			t.Fatal(err)
		}
		if len(p.calls) != 1 || p.calls[0] != c.want {
			t.Errorf("%s: primed with %q, want %q", c.sc.id, p.calls, c.want)
		}
	}
}
