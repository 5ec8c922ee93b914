package main

import (
	"strings"
	"testing"
	"time"
)

// TestRWGate checks the exclusion the read-write workers count: readers
// share, a writer is alone, and every entry that breaks this counts once.
func TestRWGate(t *testing.T) {
	var g rwGate
	steps := []struct {
		write, enter, ok bool
	}{
		{write: false, enter: true, ok: true},  // 1 reader
		{write: false, enter: true, ok: true},  // 2 readers
		{write: false, enter: true, ok: true},  // 3 readers
		{write: true, enter: true, ok: false},  // a writer beside 3 readers
		{write: false, enter: true, ok: false}, // a reader beside the writer
		{write: true, enter: false},
		{write: false, enter: false},
		{write: false, enter: false},
		{write: false, enter: false},
		{write: false, enter: false},          // nobody inside
		{write: true, enter: true, ok: true},  // a writer alone
		{write: true, enter: true, ok: false}, // a second writer
		{write: true, enter: false},
		{write: true, enter: false},
		{write: true, enter: true, ok: true}, // alone again
		{write: true, enter: false},
		{write: false, enter: true, ok: true},
	}
	for i, s := range steps {
		if !s.enter {
			g.leave(s.write)
			continue
		}
		if ok := g.enter(s.write, true); ok != s.ok {
			t.Errorf("step %d: enter(write=%v) = %v, want %v", i, s.write, ok, s.ok)
		}
	}
	if v := g.violations.Load(); v != 3 {
		t.Errorf("violations = %d, want 3", v)
	}
	if p := g.peakReaders.Load(); p != 4 {
		t.Errorf("peak readers = %d, want 4 (3, and the one beside the writer)", p)
	}
	if s := g.state.Load(); s != 1 {
		t.Errorf("state = %#x at the end, want one reader", s)
	}
	// Outside the window the peak stays, the exclusion is checked.
	g.enter(false, false)
	g.enter(false, false)
	if p := g.peakReaders.Load(); p != 4 {
		t.Errorf("peak readers = %d after entries outside the window, want 4", p)
	}
	if g.enter(true, false) {
		t.Error("a writer beside 3 readers outside the window passed")
	}
}

// TestRWGateGaps checks the longest time without an entry: marks may
// come out of order, and the time before the first and after the last
// count.
func TestRWGateGaps(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name  string
		marks []int // ms after base; the window is 100-1000
		want  int
	}{
		{"none", nil, 900},
		{"before the first", []int{400, 450, 700, 900}, 300},
		{"after the last", []int{150, 200}, 800},
		{"between", []int{100, 110, 600, 990}, 490},
		{"out of order", []int{300, 200, 250, 700, 650, 1000}, 400},
	} {
		g := rwGate{base: base}
		g.open(at(100))
		for _, m := range c.marks {
			g.mark(at(m))
		}
		if got := g.longestGap(at(1000)); got != time.Duration(c.want)*time.Millisecond {
			t.Errorf("%s: longest gap %v, want %dms", c.name, got, c.want)
		}
	}
}

// TestWorkerRand checks that the draws are the same for a worker in every
// run, differ between workers, and make about 10% writes.
func TestWorkerRand(t *testing.T) {
	a, b, c := newWorkerRand(3), newWorkerRand(3), newWorkerRand(4)
	same, writes := true, 0
	const n = 100000
	for range n {
		x := a.Float64()
		if x != b.Float64() {
			t.Fatal("two sources of worker 3 differ")
		}
		if x != c.Float64() {
			same = false
		}
		if x >= 0.9 {
			writes++
		}
	}
	if same {
		t.Error("workers 3 and 4 draw the same")
	}
	if writes < n/10-1000 || writes > n/10+1000 {
		t.Errorf("%d writes in %d draws, want about 10%%", writes, n)
	}
}

// TestReportRW checks a read-write table's columns and figures.
func TestReportRW(t *testing.T) {
	sc := scenario{id: "rw", title: "rw", contended: true, reads: 0.9, workers: 4, lockers: 2}
	fake := func(l lib, ops, writes int64) *result {
		r := &result{lib: l, elapsed: 2 * time.Second, lat: new(hist), writeLat: new(hist), peakReaders: 3,
			tally:     tally{ops: ops, writes: writes, holdSum: 3 * time.Second, writeHoldSum: time.Second},
			perWorker: []int64{ops / 4, ops / 4, ops / 4, ops / 4}}
		r.lat.record(time.Millisecond)
		r.writeLat.record(4 * time.Millisecond)
		r.server.reads = 3 * ops
		return r
	}
	tab := report(sc, []*result{fake(rawRWLib{}, 1000, 100), fake(smithRWLib{}, 2000, 200)}, 100*time.Microsecond)
	if len(tab.header) != len(rwColumns) {
		t.Fatalf("header has %d columns, want %d", len(tab.header), len(rwColumns))
	}
	for _, row := range tab.rows {
		if len(row) != len(tab.header) {
			t.Fatalf("row %q has %d cells, want %d", row[0], len(row), len(tab.header))
		}
	}
	want := map[string]string{
		"library":                    "locksmith rwmutex",
		"acq/s":                      "1,000 (2.00x)",
		"reads/s":                    "900 (2.00x)",
		"writes/s":                   "100 (2.00x)",
		"readers inside mean / peak": "1.00 / 3",
		"writer inside":              "50%",
		"read wait p50":              "1.00ms (1.00x)",
		"write wait p99":             "4.00ms (1.00x)",
		"requests/acq":               "3.00 (1.00x)",
		"acq/worker min/mean/max":    "500 / 500 / 500",
		"share per instance":         "50% / 50%",
		"violations":                 "0",
	}
	for i, col := range tab.header {
		if w, ok := want[col]; ok && tab.rows[1][i] != w {
			t.Errorf("%s = %q, want %q", col, tab.rows[1][i], w)
		}
	}
	if strings.Contains(strings.Join(tab.notes, "\n"), "no raw baseline") {
		t.Errorf("the raw rwlock is not taken as the baseline: %q", tab.notes)
	}
	if strings.Contains(strings.Join(tab.notes, "\n"), "nobody entered") {
		t.Errorf("a note of a stall without one: %q", tab.notes)
	}
	stalled := fake(smithRWLib{}, 0, 0)
	stalled.longestGap = time.Second
	stalled.roundRatios = []float64{0, 0}
	tab = report(sc, []*result{fake(rawRWLib{}, 1000, 100), stalled}, 100*time.Microsecond)
	if !strings.Contains(strings.Join(tab.notes, "\n"), "locksmith rwmutex: nobody entered for 1.00s at a stretch (measured in rounds of 1.00s)") {
		t.Errorf("no note of the stall: %q", tab.notes)
	}
}
