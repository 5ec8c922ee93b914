//go:build linux

package faults

import (
	"time"

	"golang.org/x/sys/unix"
)

// A Clock gives times in nanoseconds since a common origin, on the
// system's monotonic clock, so that the times recorded by the test process
// and by the helper processes it starts can be compared. Within a process
// it counts with Go's monotonic readings; it reads CLOCK_MONOTONIC once,
// when it is made, to find the origin's place on its own time line.
//
// The zero Clock is not valid: use NewClock or ClockFrom.
type Clock struct {
	base   int64     // CLOCK_MONOTONIC at the origin, in ns
	local  time.Time // a local instant, with a monotonic reading
	offset int64     // local's time since the origin, in ns
}

// NewClock returns a Clock whose origin is now.
func NewClock() Clock {
	return ClockFrom(monotonicNow())
}

// ClockFrom returns a Clock whose origin is base, a CLOCK_MONOTONIC reading
// in nanoseconds, as returned by another Clock's Base.
func ClockFrom(base int64) Clock {
	local := time.Now()
	return Clock{base: base, local: local, offset: monotonicNow() - base}
}

// Base returns the origin as a CLOCK_MONOTONIC reading, for ClockFrom in
// another process.
func (c Clock) Base() int64 { return c.base }

// Now returns the current time.
func (c Clock) Now() int64 { return c.At(time.Now()) }

// At returns the time of t, which must carry a monotonic reading (come
// from time.Now, or be derived from such a time with Add).
func (c Clock) At(t time.Time) int64 { return c.offset + int64(t.Sub(c.local)) }

func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faults: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
