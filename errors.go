package locksmith

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error the package returns wraps at most a few of
// these; match them with errors.Is, never with ==.
var (
	// ErrNotObtained means the lock was not obtained because someone else
	// holds it and the retry strategy gave up, or because the caller's
	// context ended; in the second case the error also matches ctx.Err().
	// It is never returned for a Redis failure: an unreachable or failing
	// Redis yields an error that does not match ErrNotObtained.
	ErrNotObtained = errors.New("locksmith: not obtained")

	// ErrNotHeld means the lock is no longer held by this handle: it expired,
	// was deleted, was taken by another holder, or was already released.
	// The call that returns it has not touched the key.
	ErrNotHeld = errors.New("locksmith: lock not held")

	// ErrLockLost is the cause of a lease context's cancellation when the
	// lock was found gone or taken, or when its validity ran out locally
	// before a renewal succeeded. WithLock returns an error matching it when
	// the lock was lost while its function ran. Obtain returns it when the
	// acquire reply arrived after the lock's validity had already run out.
	ErrLockLost = errors.New("locksmith: lock lost")

	// ErrMaxHold is the cause of a lease context's cancellation when the
	// lock has been held for as long as WithMaxHold allows: the lease
	// stopped renewing it. It matches ErrLockLost too, so code that checks
	// for a lost lock treats a capped one alike.
	ErrMaxHold error = maxHoldError{}

	// ErrNotReplicated means Obtain took the lock but fewer replicas than
	// WithReplicas asks for acknowledged it in time, so Obtain released it
	// again. Like a Redis failure, it does not match ErrNotObtained.
	ErrNotReplicated = errors.New("locksmith: not acknowledged by enough replicas")

	// ErrClosed means the Locker was closed (see Locker.Close): the call
	// sent nothing, or, for an Obtain that was waiting, withdrew from the
	// queue and left no lock behind.
	ErrClosed = errors.New("locksmith: locker closed")

	// ErrNoPermission means the connected Redis user may not run a
	// command that the call needs (an ACL rule refuses it): the call
	// stopped before changing anything. The error names what is refused;
	// see Locker.Check.
	ErrNoPermission = errors.New("locksmith: permission denied")

	// ErrResigned is the cause of a term's context's cancellation when
	// the leader resigned (see Term.Resign).
	ErrResigned = errors.New("locksmith: resigned")

	// ErrNoLeader means nobody leads the election (see Election.Leader).
	ErrNoLeader = errors.New("locksmith: no leader")

	// ErrWrongKind means the key holds another kind of lock than the call
	// is for: a semaphore's permits where a read-write lock was asked for,
	// or the other way round. A name is one kind only; the call changed
	// nothing.
	ErrWrongKind = errors.New("locksmith: another kind of lock is stored there")

	// ErrRestarted means a master was left out of an acquire or a
	// renewal by the restart guard (see NewQuorum and WithRestartGuard):
	// it has been up for less than the longest TTL the Locker grants, or
	// the guard could not read how long it has been up. Such errors are
	// a *RestartError, which names the master and how long it stays out.
	// An Obtain refused for it also matches ErrNotObtained: a caller that
	// waits (WithRetry) waits it out.
	ErrRestarted = errors.New("locksmith: master restarted too recently to count")

	// ErrInvalidArgument means a key, option or argument was rejected before
	// anything was sent to Redis.
	ErrInvalidArgument = errors.New("locksmith: invalid argument")
)

// notObtained is the error of a call for key that gave up when ctx ended.
func notObtained(ctx context.Context, key string) error {
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, ctx.Err())
}

// closedErr is the error of a waiter of key whose Locker was closed.
func closedErr(key string) error {
	return fmt.Errorf("%w: obtaining %q", ErrClosed, key)
}

// maxHoldError is the type of ErrMaxHold, which also matches ErrLockLost.
type maxHoldError struct{}

func (maxHoldError) Error() string { return "locksmith: lock lost: held for the maximum time" }

func (maxHoldError) Is(target error) bool { return target == ErrLockLost }

// A RestartError says why the restart guard left a master out: it has
// been up for Up, less than the Locker's maximum TTL (see WithMaxTTL), and
// stays out for StaysOut more, counted from when the error was made; or
// the guard could not read its uptime (Err says why: the master is then
// out until a reading succeeds, and StaysOut is zero). It matches
// ErrRestarted.
type RestartError struct {
	// Master is the master's address, as its client dials it, or "of
	// the Sentinel group" for a failover client's master.
	Master string
	// RunID is the master's run_id (it changes with every start of the
	// server process); "" when Err is set.
	RunID string
	// Up is how long the master has been up at least, and StaysOut how
	// much longer it stays out.
	Up, StaysOut time.Duration
	// Err is why the uptime is not known; nil when it is.
	Err error
}

func (e *RestartError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("master %s does not count until its uptime is read: %v", e.Master, e.Err)
	}
	return fmt.Sprintf("master %s (run_id %.8s) has been up for %v, stays out for %v more",
		e.Master, e.RunID, e.Up.Round(time.Millisecond), e.StaysOut.Round(time.Millisecond))
}

// Unwrap returns ErrRestarted and Err, if any.
func (e *RestartError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRestarted, e.Err}
	}
	return []error{ErrRestarted}
}
