package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReportBaseline checks that the first result is the baseline of a
// table when it is a raw library's, the lock's or the semaphore's, and
// that a semaphore table has its own columns.
func TestReportBaseline(t *testing.T) {
	sem := scenario{id: "sem", title: "sem", contended: true, permits: 4, workers: 4, lockers: 2}
	lock := scenario{id: "lock", title: "lock", contended: true, workers: 4, lockers: 2}
	fake := func(l lib, ops int64, held time.Duration) *result {
		return &result{lib: l, elapsed: time.Second, tally: tally{ops: ops, holdSum: held}, lat: new(hist), perWorker: []int64{ops / 2, ops / 2}}
	}
	for _, c := range []struct {
		name    string
		sc      scenario
		results []*result
		base    bool     // the first result is the baseline
		header  []string // the first columns
		row     []string // the first cells of the second row
	}{
		{
			name:    "semaphore, raw first",
			sc:      sem,
			results: []*result{fake(rawSemLib{}, 100, 2*time.Second), fake(smithSemLib{}, 200, 3500*time.Millisecond)},
			base:    true,
			header:  []string{"library", "permits/s", "by round vs raw", "held of 4", "gap p50"},
			row:     []string{"locksmith semaphore", "200 (2.00x)", "-", "3.50"},
		},
		{
			name:    "lock, raw first",
			sc:      lock,
			results: []*result{fake(rawLib{}, 100, 0), fake(locksmithLib{}, 300, 0)},
			base:    true,
			header:  []string{"library", "handoffs/s", "to another/s", "gap p50"},
			row:     []string{"locksmith", "300 (3.00x)"},
		},
		{
			name:    "semaphore, no raw",
			sc:      sem,
			results: []*result{fake(smithSemLib{}, 100, 0), fake(smithSemLib{}, 200, 0)},
			row:     []string{"locksmith semaphore", "200"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := report(c.sc, c.results, 100*time.Microsecond)
			for i, want := range c.header {
				if got := tab.header[i]; got != want {
					t.Errorf("header[%d] = %q, want %q", i, got, want)
				}
			}
			for _, row := range tab.rows {
				if len(row) != len(tab.header) {
					t.Fatalf("row %q has %d cells, want %d", row[0], len(row), len(tab.header))
				}
			}
			for i, want := range c.row {
				if got := tab.rows[1][i]; got != want {
					t.Errorf("row[1][%d] = %q, want %q", i, got, want)
				}
			}
			noBase := strings.Contains(strings.Join(tab.notes, "\n"), "no raw baseline")
			if noBase == c.base {
				t.Errorf("note of no baseline: %v, want %v (notes %q)", noBase, !c.base, tab.notes)
			}
		})
	}
}

// TestReportSets checks the set tables: the one-script set is their
// baseline, an uncontended table has the columns of a cycle, and a
// contended one the held sets, the fairness and every worker's share.
func TestReportSets(t *testing.T) {
	serial := scenario{id: "set2", title: "set2", set: 2, pool: 2, workers: 1, lockers: 1}
	contended := scenario{id: "set16", title: "set16", contended: true, set: 2, pool: 8, workers: 4, lockers: 2}
	fake := func(l lib, ops int64, perWorker ...int64) *result {
		return &result{lib: l, elapsed: time.Second, tally: tally{ops: ops, holdSum: 2 * time.Second}, lat: new(hist), perWorker: perWorker}
	}
	for _, c := range []struct {
		name   string
		sc     scenario
		header []string // the first columns
		row    []string // the first cells of the second row
		cell   string   // a column of the second row, and its value
		want   string
	}{
		{
			name:   "uncontended",
			sc:     serial,
			header: []string{"library", "cycles/s", "by round vs one-script", "p50"},
			row:    []string{"locksmith ObtainAll", "200 (2.00x)"},
			cell:   "violations", want: "0",
		},
		{
			name:   "contended",
			sc:     contended,
			header: []string{"library", "sets/s", "by round vs one-script", "held of 4", "wait p50"},
			row:    []string{"locksmith ObtainAll", "200 (2.00x)", "-", "2.00"},
			cell:   "fairness min/mean", want: "0.50",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			results := []*result{fake(setScriptBase{}, 100, 25, 25, 25, 25), fake(smithSetLib{}, 200, 25, 75, 50, 50)}
			tab := report(c.sc, results, 100*time.Microsecond)
			for i, want := range c.header {
				if got := tab.header[i]; got != want {
					t.Errorf("header[%d] = %q, want %q", i, got, want)
				}
			}
			for _, row := range tab.rows {
				if len(row) != len(tab.header) {
					t.Fatalf("row %q has %d cells, want %d", row[0], len(row), len(tab.header))
				}
			}
			for i, want := range c.row {
				if got := tab.rows[1][i]; got != want {
					t.Errorf("row[1][%d] = %q, want %q", i, got, want)
				}
			}
			i := slices.Index(tab.header, c.cell)
			if i < 0 {
				t.Fatalf("no column %q in %q", c.cell, tab.header)
			}
			if got := tab.rows[1][i]; got != c.want {
				t.Errorf("%s = %q, want %q", c.cell, got, c.want)
			}
			if strings.Contains(strings.Join(tab.notes, "\n"), "no raw baseline") {
				t.Errorf("the one-script set is not taken as the baseline (notes %q)", tab.notes)
			}
		})
	}
}
