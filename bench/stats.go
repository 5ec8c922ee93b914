package main

import (
	"math"
	"math/bits"
	"time"
)

// A hist is a log-linear histogram of durations: exact below 128ns, and
// above that in buckets 1/64 of a power of two wide, so a quantile is off
// by less than 1%. Recording never allocates, which keeps the harness out
// of the allocation counts. A hist is used by one goroutine; merge them
// afterwards.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // exact values, then sub-buckets per power of two
	histBuckets = histSub + (64-histSubBits)*(histSub/2)
)

func bucketOf(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits // >= 1
	m := v >> shift                      // in [histSub/2, histSub)
	return histSub + (shift-1)*(histSub/2) + int(m-histSub/2)
}

// bucketMid returns the middle of bucket i.
func bucketMid(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	i -= histSub
	shift := i/(histSub/2) + 1
	m := uint64(i%(histSub/2) + histSub/2)
	lo := m << shift
	return lo + (uint64(1)<<shift)/2
}

func (h *hist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1), or -1 when h is empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return -1
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketMid(i)), h.max)
		}
	}
	return h.max
}
