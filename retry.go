package locksmith

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// A RetryStrategy decides whether and when Obtain tries again after finding
// the lock held by someone else. A strategy is a recipe, not a running
// state: Obtain calls NewBackoff once per call, so one strategy value can be
// shared by any number of goroutines and calls, and each call gets its own
// full budget. Implementations must be safe for concurrent use.
//
// Users may write their own; the functions in this package cover the common
// cases.
type RetryStrategy interface {
	// NewBackoff returns the sequence of delays for one Obtain call.
	NewBackoff() Backoff
}

// A Backoff is the state of one Obtain call's retries. It is used by one
// goroutine only.
type Backoff interface {
	// Next returns how long to wait before the next attempt, or false to
	// stop trying. Obtain may try earlier than the delay says, for example
	// when the current holder's TTL runs out sooner.
	Next() (delay time.Duration, ok bool)
}

type noRetry struct{}

func (noRetry) NewBackoff() Backoff         { return noRetry{} }
func (noRetry) Next() (time.Duration, bool) { return 0, false }
func (noRetry) String() string              { return "NoRetry()" }

// NoRetry returns the strategy that tries once and gives up. It is the
// default.
func NoRetry() RetryStrategy { return noRetry{} }

// linearBackoff is a pointer, so that NewBackoff can return the strategy
// itself (it keeps no state) without allocating on every call.
type linearBackoff struct{ d time.Duration }

func (s *linearBackoff) NewBackoff() Backoff         { return s }
func (s *linearBackoff) Next() (time.Duration, bool) { return s.d, true }

func (s *linearBackoff) validate() error {
	if s.d < time.Millisecond {
		return fmt.Errorf("%w: LinearBackoff interval %v is under 1ms", ErrInvalidArgument, s.d)
	}
	return nil
}

// LinearBackoff returns a strategy that waits d between attempts, for as
// long as the caller's context allows. d must be at least 1ms. Combine it
// with LimitRetry to bound the number of attempts.
func LinearBackoff(d time.Duration) RetryStrategy { return &linearBackoff{d} }

type exponentialBackoff struct{ min, max time.Duration }

func (s exponentialBackoff) validate() error {
	if s.min < time.Millisecond {
		return fmt.Errorf("%w: ExponentialBackoff minimum %v is under 1ms", ErrInvalidArgument, s.min)
	}
	if s.max < s.min {
		return fmt.Errorf("%w: ExponentialBackoff maximum %v is below its minimum %v", ErrInvalidArgument, s.max, s.min)
	}
	return nil
}

func (s exponentialBackoff) NewBackoff() Backoff {
	return &exponentialState{s: s, next: s.min}
}

type exponentialState struct {
	s    exponentialBackoff
	next time.Duration // the ceiling of the next delay before jitter
}

func (b *exponentialState) Next() (time.Duration, bool) {
	ceil := b.next
	if b.next < b.s.max {
		// Doubling past half the maximum would overflow a huge max.
		if b.next > b.s.max/2 {
			b.next = b.s.max
		} else {
			b.next *= 2
		}
	}
	// Equal jitter: half fixed, half random, and never below the minimum,
	// so that waiters that started together spread out.
	half := ceil / 2
	d := half + rand.N(ceil-half+1)
	return max(d, b.s.min), true
}

// ExponentialBackoff returns a strategy whose delays double from min up to
// max, each randomised to between half and all of its value (but never
// below min) so that waiters spread out. min must be at least 1ms and max
// at least min.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	return exponentialBackoff{min: min, max: max}
}

type limitRetry struct {
	s   RetryStrategy
	max int
}

func (s limitRetry) validate() error {
	if s.s == nil {
		return fmt.Errorf("%w: LimitRetry strategy is nil", ErrInvalidArgument)
	}
	if s.max < 0 {
		return fmt.Errorf("%w: LimitRetry count %d is negative", ErrInvalidArgument, s.max)
	}
	if v, ok := s.s.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

func (s limitRetry) NewBackoff() Backoff {
	return &limitState{b: s.s.NewBackoff(), left: s.max}
}

type limitState struct {
	b    Backoff
	left int
}

func (b *limitState) Next() (time.Duration, bool) {
	if b.left <= 0 {
		return 0, false
	}
	b.left--
	return b.b.Next()
}

// LimitRetry wraps s so that Obtain makes at most maxRetries attempts after
// the first one. maxRetries must not be negative; zero means try once.
func LimitRetry(s RetryStrategy, maxRetries int) RetryStrategy {
	return limitRetry{s: s, max: maxRetries}
}
