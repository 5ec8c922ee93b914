package locksmith

import (
	"fmt"
	"time"
)

// DefaultTTL is the lock TTL used when no WithTTL option is given. It bounds
// how long a holder that crashed without releasing blocks everyone else.
const DefaultTTL = 10 * time.Second

// An Option configures a Locker or a single call. Given to New or NewQuorum
// it sets the Locker's default; given to Obtain, WithLock, Once, Completed or
// Inspect it overrides that default for the one call. Options are applied
// in order, so a later one wins. Every call checks all the options it is
// given, also those it has no use for (Completed and Inspect use only the
// prefix).
//
// An Option is a small value, not a function or an interface, so that
// passing options on every call, as the examples do, allocates nothing.
// Make one with the With functions; the zero Option is invalid.
//
// An invalid option is never silently clamped: the call that uses it returns
// an error matching ErrInvalidArgument and sends nothing to Redis.
type Option struct {
	kind   optionKind
	d      time.Duration
	n      int
	s      string
	retry  RetryStrategy
	obs    Observer
	tracer Tracer
}

// optionKind says which setting an Option carries.
type optionKind uint8

const (
	optNone optionKind = iota // the zero Option
	optTTL
	optRetry
	optPrefix
	optRenewInterval
	optDrift
	optFencing
	optFenceTTL
	optReplicas
	optDoneTTL
	optObserver
	optTracer
	optMaxHold
	optMaxTTL
	optRestartGuard
	optPersistentMaster
)

// apply applies one option to c.
func (o Option) apply(c *config) error {
	switch o.kind {
	case optTTL:
		ttl, err := checkTTL(o.d)
		if err != nil {
			return err
		}
		if ttl != c.ttl {
			c.ttl, c.ttlMS = ttl, nil // boxed by the Locker, see msValue
		}
	case optRetry:
		if o.retry == nil {
			return fmt.Errorf("%w: retry strategy is nil", ErrInvalidArgument)
		}
		if v, ok := o.retry.(interface{ validate() error }); ok {
			if err := v.validate(); err != nil {
				return err
			}
		}
		c.retry = o.retry
	case optPrefix:
		if err := checkPrefix(o.s); err != nil {
			return err
		}
		c.prefix = o.s
	case optRenewInterval:
		if o.d <= 0 {
			return fmt.Errorf("%w: renew interval %v is not positive", ErrInvalidArgument, o.d)
		}
		c.renewEvery = o.d
	case optDrift:
		if o.d < 0 {
			return fmt.Errorf("%w: drift allowance %v is negative", ErrInvalidArgument, o.d)
		}
		c.drift = o.d
	case optFencing:
		c.fencing = true
	case optFenceTTL:
		if o.d < time.Millisecond {
			return fmt.Errorf("%w: fence TTL %v is under 1ms", ErrInvalidArgument, o.d)
		}
		if d := o.d.Truncate(time.Millisecond); d != c.fenceTTL {
			c.fenceTTL, c.fenceTTLMS = d, nil
		}
	case optReplicas:
		if o.n < 0 {
			return fmt.Errorf("%w: replica count %d is negative", ErrInvalidArgument, o.n)
		}
		if o.n > 0 && o.d < time.Millisecond {
			return fmt.Errorf("%w: replica wait %v is under 1ms", ErrInvalidArgument, o.d)
		}
		c.replicas, c.replicaWait = o.n, o.d.Truncate(time.Millisecond)
	case optDoneTTL:
		if o.d < time.Millisecond {
			return fmt.Errorf("%w: done TTL %v is under 1ms", ErrInvalidArgument, o.d)
		}
		c.doneTTL = o.d.Truncate(time.Millisecond)
	case optMaxHold:
		if o.d < 0 {
			return fmt.Errorf("%w: maximum hold %v is negative", ErrInvalidArgument, o.d)
		}
		c.maxHold = o.d
	case optMaxTTL:
		ttl, err := checkTTL(o.d)
		if err != nil {
			return fmt.Errorf("maximum TTL: %w", err)
		}
		c.maxTTL = ttl
	case optRestartGuard:
		c.restartGuard = true
	case optPersistentMaster:
		if o.s == "" {
			return fmt.Errorf("%w: persistent master: empty address", ErrInvalidArgument)
		}
		c.persistent = append(c.persistent[:len(c.persistent):len(c.persistent)], o.s)
	case optObserver:
		// Taken by New (see observerOf); refused per call (see
		// callConfigFor).
		if o.obs == nil {
			return fmt.Errorf("%w: observer is nil", ErrInvalidArgument)
		}
	case optTracer:
		// Taken by New (see tracerOf); refused per call, as
		// WithObserver is.
		if o.tracer == nil {
			return fmt.Errorf("%w: tracer is nil", ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("%w: the zero Option sets nothing; make options with the With functions", ErrInvalidArgument)
	}
	return nil
}

// WithTTL sets how long the lock lives in Redis without a refresh. It must
// be at least 1ms; sub-millisecond parts are dropped. The default is
// DefaultTTL. In practice a TTL should be many round trips long: the client
// counts the lock valid for the TTL less the drift allowance, from before
// the acquire is sent, so a TTL of a few milliseconds leaves almost
// nothing. A holder that crashes blocks others for at most this long, and
// work that outlives it without a Lease may run concurrently with the next
// holder's.
func WithTTL(d time.Duration) Option {
	return Option{kind: optTTL, d: d}
}

// WithRetry sets what Obtain does when the lock is held by someone else.
// The default, NoRetry, fails at once with ErrNotObtained.
func WithRetry(s RetryStrategy) Option {
	return Option{kind: optRetry, retry: s}
}

// WithPrefix sets a prefix prepended to every key: the lock for key k lives
// in Redis at prefix+k, and every other name it uses (see Keys) starts with
// prefix too, so one ACL key and channel pattern covers them all. The
// default prefix is empty (the locksmith command's is "locksmith:"). A
// prefix may contain braces only as a whole hash tag, such as "{app}:",
// which puts every lock of the prefix in one Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return Option{kind: optPrefix, s: prefix}
}

// WithRenewInterval sets how often a Lease renews the lock. It must be
// positive and shorter than the TTL; the default is a third of the TTL, which
// leaves two more attempts before the lock expires when one renewal fails.
func WithRenewInterval(d time.Duration) Option {
	return Option{kind: optRenewInterval, d: d}
}

// WithMaxHold caps how long a lock may be held: d after the lock was
// obtained (counted from the same moment as its first Deadline), its
// leases stop renewing it and their contexts are cancelled with
// ErrMaxHold, which also matches ErrLockLost; Deadline returns no later
// time, and Refresh refuses with an error matching ErrNotHeld. The lock
// itself is not deleted at the cap: it stays held until its Deadline at
// most (one TTL after its last renewal), so that the work can stop while
// it still holds it, and WithLock and Once release it as soon as their
// function returns (Once then records nothing and returns the error). Use
// it to bound how long a job stuck in a loop, whose lease would otherwise
// renew its lock for ever, keeps the others out. Zero, the default, sets
// no cap (and undoes a Locker's); d must not be negative. It applies to
// every kind of hold: locks, permits, read and write holds, and terms.
func WithMaxHold(d time.Duration) Option {
	return Option{kind: optMaxHold, d: d}
}

// WithMaxTTL bounds the TTL of every hold the Locker grants: a call that
// asks for a longer one (WithTTL on the call, Lock.Refresh with a longer
// TTL, and so the renewals of a Lease) is refused with an error matching
// ErrInvalidArgument and sends nothing. The restart guard (NewQuorum,
// WithRestartGuard) keeps a restarted master out for this long. It is an
// option of New and NewQuorum only: given to a single call it is refused
// with ErrInvalidArgument. d must be at least 1ms and at least the
// Locker's default TTL; sub-millisecond parts are dropped. Without it a
// Locker with the restart guard takes its default TTL (WithTTL given to
// New or NewQuorum, or DefaultTTL) as the bound, and a Locker without the
// guard has no bound.
func WithMaxTTL(d time.Duration) Option {
	return Option{kind: optMaxTTL, d: d}
}

// WithRestartGuard turns the restart guard on for a Locker of one server,
// Sentinel or Cluster (New); a quorum (NewQuorum) always has it. With it,
// a master counts only once it has been up for at least the Locker's
// maximum TTL (WithMaxTTL): until then an acquire on it is refused, with
// an error that matches ErrNotObtained and ErrRestarted and names the
// master and how long it stays out (a *RestartError), and a renewal on it
// fails. A lock taken before a restart without persistence is then never
// granted to a second holder inside its validity.
//
// The guard learns how long a master has been up from the server (INFO
// server: run_id and uptime_in_seconds), read by the client's OnConnect
// on every new connection, so an acquire costs no extra round trip; a
// master whose uptime is not known yet (connections made before the
// Locker) is asked once, on its first acquire. The Redis user must be
// allowed INFO. New wraps the client's OnConnect (once per client, after
// the OnConnect the client had): make the Locker before the client is in
// use by other goroutines. The client must be a *redis.Client or a
// *redis.ClusterClient.
//
// It is off by default on one server, Sentinel and Cluster: turning it on
// makes every lock unavailable for the maximum TTL after each restart of
// a master, and after its first start. On Sentinel a failover is not a
// restart: the promoted replica's process has been up all along (its
// run_id differs, its uptime is its own), so it counts at once unless it
// was itself started less than the maximum TTL ago. On Cluster the guard
// watches the master of each key's slot. It checks the acquires of every
// kind of hold and the renewals of locks and terms; the renewals of a
// semaphore's permits and of read-write holds are not checked (on a
// restarted server without persistence they are gone anyway). It is an
// option of New only: given to a single call it is refused with
// ErrInvalidArgument; NewQuorum ignores it (a quorum always has it).
func WithRestartGuard() Option {
	return Option{kind: optRestartGuard}
}

// WithPersistentMaster tells the restart guard that the master at addr
// (the address its client dials, redis.Options.Addr, or a Cluster node's
// address; for Sentinel, "FailoverClient", go-redis's name for the
// group's master) persists every write before it answers (appendonly yes,
// appendfsync always), so a restart loses no lock: it counts at once.
// Give it once per such master, to New or NewQuorum only; a single call
// refuses it with ErrInvalidArgument.
func WithPersistentMaster(addr string) Option {
	return Option{kind: optPersistentMaster, s: addr}
}

// WithDrift sets the clock-drift allowance: how much shorter than the TTL
// the client considers the lock valid, to cover the difference between the
// client's and the server's clocks. The default is TTL/100 + 2ms, but at
// most half the TTL. It must not be negative and must be shorter than the
// TTL.
func WithDrift(d time.Duration) Option {
	return Option{kind: optDrift, d: d}
}

// WithFencing makes Obtain give each acquisition a fencing token, returned
// by Lock.Fence, strictly greater than every token an earlier holder of the
// key got. The token is produced by the acquire script itself, in the same
// round trip, from a counter key in the same cluster slot as the lock (see
// Keys). By default the counter has no TTL: it costs one small key per lock
// name, kept forever; WithFenceTTL lets it expire.
//
// A token is the larger of the counter plus one and the Redis server's
// clock in microseconds, so tokens keep increasing even when the counter
// is lost, as when it expires, Redis restarts without persistence or fails
// over to a replica that missed the last increments. That relies on the
// server's clock never stepping back past the time of the last token
// issued (and, after a failover, on the new master's clock being no
// earlier than the old one's).
func WithFencing() Option {
	return Option{kind: optFencing}
}

// WithFenceTTL makes a lock's fence counter (see WithFencing) expire d
// after the last fencing token was taken, so that lock names used once
// (a date or an order number in the key) leave nothing behind for long.
// Tokens still increase after the counter expired, because each is at
// least the server's clock in microseconds; pick d longer than the largest
// clock step back you expect of the server. d must be at least 1ms;
// sub-millisecond parts are dropped. Without this option the counter never
// expires.
func WithFenceTTL(d time.Duration) Option {
	return Option{kind: optFenceTTL, d: d}
}

// WithReplicas makes Obtain wait, after taking the lock and in the same
// round trip (Redis WAIT), until n replicas have acknowledged it, for at
// most timeout. If fewer do, Obtain deletes the lock again and returns an
// error matching ErrNotReplicated. A lock acknowledged by n replicas
// survives a failover to one of them, as long as that replica is the one
// promoted.
//
// n must not be negative; zero turns the wait off. timeout must be at
// least 1ms and shorter than the TTL; sub-millisecond parts are dropped.
// While a replica lags, every attempt, successful or not, may wait up to
// timeout.
func WithReplicas(n int, timeout time.Duration) Option {
	return Option{kind: optReplicas, n: n, d: timeout}
}
