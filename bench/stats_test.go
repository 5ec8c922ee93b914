package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistQuantiles(t *testing.T) {
	var h hist
	var all []time.Duration
	for range 100000 {
		d := time.Duration(rand.ExpFloat64() * float64(200*time.Microsecond))
		h.record(d)
		all = append(all, d)
	}
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
}

func TestHistBucketsRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 40, 1<<63 - 1} {
		mid := bucketMid(bucketOf(v))
		if bucketOf(mid) != bucketOf(v) {
			t.Errorf("bucketMid(bucketOf(%d)) = %d is in another bucket", v, mid)
		}
	}
}
