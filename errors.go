package locksmith

import (
	"context"
	"errors"
	"fmt"
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
