package main

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistQuantiles records into two hists and merges them, as a run
// merges its workers', and checks the quantiles against the exact ones.
func TestHistQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h, other hist
	var all []time.Duration
	for i := range 100000 {
		d := time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		if i%3 == 0 {
			other.record(d)
		} else {
			h.record(d)
		}
		all = append(all, d)
	}
	h.merge(&other)
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 1} {
		want := all[int(q*float64(len(all)))-1]
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", q, got, want)
		}
	}
	if h.max != all[len(all)-1] {
		t.Errorf("max = %v, want %v", h.max, all[len(all)-1])
	}
	if got := new(hist).quantile(0.5); got != -1 {
		t.Errorf("empty quantile(0.5) = %v, want -1", got)
	}
	// The middle of 1000ns's bucket is 1004ns; a quantile never exceeds
	// the max.
	var one hist
	one.record(1000)
	if got := one.quantile(0.5); got != 1000 {
		t.Errorf("quantile(0.5) of {1000ns} = %v, want 1000ns", got)
	}
}

// TestHistBuckets checks the bound the quantiles rely on: a value below
// histSub is its own bucket, and any other is within 1/128 of its bucket's
// middle.
func TestHistBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	values := []uint64{0, 1, 127, 128, 129, 191, 192, 255, 256, 1000, 1 << 40, 1<<63 - 1}
	for range 10000 {
		values = append(values, rng.Uint64N(1<<63)>>rng.UintN(63))
	}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d, want in [0, %d)", v, i, histBuckets)
		}
		mid := bucketMid(i)
		if bucketOf(mid) != i {
			t.Errorf("bucketMid(bucketOf(%d)) = %d is in another bucket", v, mid)
		}
		if v < histSub {
			if mid != v {
				t.Errorf("bucketMid(bucketOf(%d)) = %d, want exact", v, mid)
			}
			continue
		}
		if diff := max(mid, v) - min(mid, v); diff > v/128 {
			t.Errorf("bucketMid(bucketOf(%d)) = %d, off by %d, more than 1/128", v, mid, diff)
		}
	}
}

func TestByRound(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want string
	}{
		{nil, "-"},
		{[]float64{0, 0}, "-"},
		{[]float64{0.9}, "0.90x"},
		{[]float64{1.2, 0.8, 1.0}, "1.00x (0.80-1.20)"},
		{[]float64{1.1, 0.9, 0, 1.0, 0.95}, "0.97x (0.90-1.10)"},
	} {
		if got := byRound(c.in); got != c.want {
			t.Errorf("byRound(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPairedCell(t *testing.T) {
	rounds := func(ratios ...float64) *result { return &result{roundRatios: ratios} }
	for _, c := range []struct {
		name string
		r, c *result
		want string
	}{
		// Round by round 1.1, 0.5 and 1.2 (and 1.0, a tie, not a win).
		{"median and wins", rounds(1.1, 0.5, 1.2, 0.9), rounds(1.0, 1.0, 1.0, 0.9), "1.05x (2/4)"},
		{"rounds without a baseline left out", rounds(0, 2.0, 1.0), rounds(1.0, 1.0, 2.0), "1.25x (1/2)"},
		{"drift between rounds cancels", rounds(0.5, 2.0), rounds(0.25, 1.0), "2.00x (2/2)"},
		{"no common round", rounds(0, 1.0), rounds(1.0, 0), "-"},
		{"a failed result", &result{err: errors.New("down"), roundRatios: []float64{1}}, rounds(1.0), "-"},
		{"rounds that differ", rounds(1.0, 1.0), rounds(1.0), "-"},
	} {
		if got := pairedCell(c.r, c.c); got != c.want {
			t.Errorf("%s: pairedCell = %q, want %q", c.name, got, c.want)
		}
	}
}
