package locksmith

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// The resolved options of a call (config) and the checks of its inputs.

// config is the resolved set of options for one call. It is copied by value
// from the Locker's defaults, so applying per-call options never changes the
// Locker. Its holdConfig is what the call's hold keeps (Lock.cfg); the
// rest serves the call only.
type config struct {
	holdConfig

	retry RetryStrategy // never nil

	// restartGuard turns the restart guard on (always on for a quorum),
	// and persistent names the masters it need not wait for. Both are the
	// Locker's, never a call's, as maxTTL is.
	restartGuard bool
	persistent   []string

	// fencing makes Obtain take a fencing token (the hold keeps it in
	// Lock.fencing); the counter lives fenceTTL after a token was taken,
	// for ever when zero. fenceTTLMS is fenceTTL in milliseconds, an
	// int64, converted once for go-redis.
	fencing    bool
	fenceTTL   time.Duration
	fenceTTLMS any

	// doneTTL is how long Once keeps a completion record: whole
	// milliseconds, at least 1 ms.
	doneTTL time.Duration

	// election is set for an election's campaign, whose tokens carry the
	// candidate's value and whose locks keep a proclaimed value beside
	// them: see election.go. Not an option.
	election bool
	value    string
}

// holdConfig is the part of a call's config that its hold (a Lock) keeps
// and reads after the acquire: to renew it, to compute its validity and
// to name it in events. Kept apart so that a handle carries 88 bytes of
// config instead of 200.
type holdConfig struct {
	ttl   time.Duration // whole milliseconds, at least 1 ms
	ttlMS any           // ttl in milliseconds, an int64, converted once for go-redis

	// renewEvery is the lease renewal period; zero means ttl/3.
	renewEvery time.Duration
	// maxHold is how long a lock may be held, from when it was obtained,
	// before its leases stop renewing it; zero means no limit.
	maxHold time.Duration
	// maxTTL bounds every TTL a call may ask for (see WithMaxTTL); zero
	// means no bound. The Locker's, never a call's.
	maxTTL time.Duration
	// drift is the clock-drift allowance subtracted from the TTL when the
	// client computes how long the lock is valid; negative means the
	// default, ttl/100 + 2ms (at most half the TTL).
	drift time.Duration

	prefix string

	// replicas is how many replicas must acknowledge an acquire, within
	// replicaWait; zero means none.
	replicas    int
	replicaWait time.Duration
}

func defaultConfig() config {
	return config{holdConfig: holdConfig{ttl: DefaultTTL, ttlMS: DefaultTTL.Milliseconds(), drift: -1},
		retry: NoRetry(), doneTTL: DefaultDoneTTL, fenceTTLMS: int64(0)}
}

// apply applies opts to c and checks the result as a whole. The boxes
// give the millisecond values that changed their interface form.
func (c *config) apply(opts []Option, boxes *msBoxes) error {
	for _, o := range opts {
		if err := o.apply(c); err != nil {
			return err
		}
	}
	if c.maxTTL > 0 && c.ttl > c.maxTTL {
		return fmt.Errorf("%w: TTL %v is longer than the Locker's maximum TTL %v (see WithMaxTTL)", ErrInvalidArgument, c.ttl, c.maxTTL)
	}
	if c.renewEvery >= c.ttl {
		return fmt.Errorf("%w: renew interval %v must be shorter than the TTL %v", ErrInvalidArgument, c.renewEvery, c.ttl)
	}
	if c.drift >= c.ttl {
		return fmt.Errorf("%w: drift allowance %v must be shorter than the TTL %v", ErrInvalidArgument, c.drift, c.ttl)
	}
	if c.replicas > 0 && c.replicaWait >= c.ttl {
		return fmt.Errorf("%w: replica wait %v must be shorter than the TTL %v", ErrInvalidArgument, c.replicaWait, c.ttl)
	}
	if c.ttlMS == nil {
		c.ttlMS = boxes.ttl.value(c.ttl)
	}
	if c.fenceTTLMS == nil {
		c.fenceTTLMS = boxes.fenceTTL.value(c.fenceTTL)
	}
	return nil
}

// msBoxes holds a Locker's last TTLs in the form go-redis takes them.
type msBoxes struct{ ttl, fenceTTL msBox }

// An msBox converts a duration to its whole milliseconds as an interface
// value, the form go-redis takes arguments in, and remembers the last one.
// Converting an int64 to an interface allocates; code passes the same TTL
// on every call, so remembering one saves that allocation on each of them.
type msBox struct{ last atomic.Pointer[boxedMS] }

type boxedMS struct {
	ms int64
	v  any
}

func (b *msBox) value(d time.Duration) any {
	ms := d.Milliseconds()
	if p := b.last.Load(); p != nil && p.ms == ms {
		return p.v
	}
	p := &boxedMS{ms: ms, v: ms}
	b.last.Store(p)
	return p.v
}

// renewInterval returns how often a lease renews a lock of the given TTL.
func (c *holdConfig) renewInterval(ttl time.Duration) time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery
	}
	return ttl / 3
}

// driftFor returns the drift allowance for a lock of the given TTL.
func (c *holdConfig) driftFor(ttl time.Duration) time.Duration {
	if c.drift >= 0 {
		return c.drift
	}
	return min(ttl/100+2*time.Millisecond, ttl/2)
}

// checkKey reports whether key may name a lock: see keyslot.CheckKey.
func checkKey(key string) error {
	if err := keyslot.CheckKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// checkPrefix reports whether prefix may prefix lock keys: see
// keyslot.CheckPrefix.
func checkPrefix(prefix string) error {
	if err := keyslot.CheckPrefix(prefix); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// checkTTL validates a TTL given by the caller. Redis counts TTLs in whole
// milliseconds, so sub-millisecond parts are dropped (making the lock
// slightly shorter, never longer, than asked).
func checkTTL(d time.Duration) (time.Duration, error) {
	if d < time.Millisecond {
		return 0, fmt.Errorf("%w: TTL %v is under 1ms", ErrInvalidArgument, d)
	}
	return d.Truncate(time.Millisecond), nil
}
