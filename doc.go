// Package locksmith provides distributed locks stored in Redis, so that of
// several processes only one does a piece of work at a time: one of five
// servers runs the nightly report, one worker at a time changes an order.
//
// # The recipe
//
// A lock is a Redis key holding a random token that identifies one
// acquisition. Obtain creates the key with SET NX PX, so it succeeds only
// when the key is absent and the key expires by itself after the TTL.
// Release deletes the key only if it still holds the caller's token
// (compare-and-delete), and Refresh resets its TTL only if it still holds
// the token (compare-and-pexpire). Each step is a Lua script run in one
// round trip, so a holder whose lock has expired can never delete or extend
// the next holder's lock, and a holder that crashes blocks the others for at
// most one TTL.
//
// # Lockers and locks
//
// A Locker, made by New, wraps a go-redis client and the default options; it
// is safe for concurrent use and one can serve a whole process. Its Obtain
// method returns a Lock, the handle to one acquisition, with Release,
// Refresh, TTL and Deadline. WithLock does the common case in one call: it
// obtains the lock, runs a function under a lease, and releases the lock
// when the function returns.
//
//	locker := locksmith.New(client, locksmith.WithPrefix("locksmith:"))
//	err := locker.WithLock(ctx, "report:2026-11-30", func(ctx context.Context) error {
//		return buildReport(ctx) // must stop when ctx is done
//	}, locksmith.WithTTL(30*time.Second))
//	switch {
//	case errors.Is(err, locksmith.ErrNotObtained):
//		// Another process holds the lock: skip the job.
//	case err != nil:
//		return err // Redis trouble, the job failed, or the lock was lost
//	}
//
// By default Obtain tries once; WithRetry sets a RetryStrategy to wait for
// the lock instead, and the caller's context bounds the wait. A waiter is
// queued in Redis when it finds the lock taken, and a release hands the
// lock straight to the first waiter queued, in the same round trip,
// announcing it to the waiter's Locker; within a Locker, waiters are
// served in arrival order. Releases that are not announced (a key that
// expired or was deleted by hand, a holder using the plain SET NX recipe)
// are noticed within one retry delay and a round trip: the first waiter
// of each Locker tries once per delay, however many goroutines wait.
//
// Once runs a job under the lock unless a completion record says it already
// ran, and writes that record together with the release.
//
// Locker.Semaphore and Locker.RWMutex hand out leased permits of a counted
// semaphore and holds of a read-write lock, and Locker.Election runs a
// leader election: Campaign waits until the caller leads and returns a
// Term, a fenced lock renewed until it is resigned or lost, whose context
// says when leadership ends; Run is the loop of a process that should do
// leader work whenever it leads, and Leader and Observe tell who leads.
//
// # Leases
//
// Work that may outlast the TTL runs under a lease: Lock.Lease renews the
// lock in the background, every third of the TTL by default, and returns a
// context that is cancelled with the cause ErrLockLost as soon as a renewal
// finds the lock gone or taken, or the lock's Deadline passes without a
// successful renewal. WithLock gives such a context to its function, and
// LockFromContext returns the Lock from it. Check context.Cause to tell a
// lost lock from an ordinary cancellation.
//
// # Observability
//
// WithObserver, given to New, makes a Locker report what it does as
// Events to an Observer: obtains with their wait and attempts, releases,
// renewals, lost leases, Once's results and its pub/sub connection's
// state. An observer runs on a goroutine of the Locker, behind a bounded
// buffer, so it never slows locking down; SlogObserver writes the
// notable events to a log/slog logger. WithTracer makes it tell a Tracer,
// on the caller's goroutine, when each call starts and ends, and run the
// call's Redis commands in the context the Tracer returns, so that a span
// opened there is their parent. The module
// github.com/locksmith-go/locksmith/otel builds OpenTelemetry metrics and
// spans on both.
//
// # Errors
//
// Errors wrap the sentinels ErrNotObtained, ErrNotHeld, ErrLockLost,
// ErrNotReplicated, ErrClosed, ErrNoPermission, ErrResigned, ErrNoLeader,
// ErrWrongKind and ErrInvalidArgument; match them with errors.Is, never
// with ==. ErrNotObtained means someone else holds the lock, or the
// caller's context ended while it waited. ErrNotHeld means a handle's
// lock is no longer held by it; ErrLockLost means the lock was lost while
// it was held, and is the cause of a lease's cancellation.
// ErrNotReplicated means that, with WithReplicas, too few replicas
// acknowledged the lock in time, so it was released again; treat it as a
// Redis failure. ErrClosed means the Locker was closed (see
// Locker.Close). ErrNoPermission means an ACL rule refuses a command the
// call needs, found before anything was written (see Locker.Check).
// ErrResigned is the cause of a term's cancellation when its leader
// resigned, and ErrNoLeader means nobody leads the election (see
// Election.Leader). ErrWrongKind means the key holds another kind of lock
// than the call is for, such as a semaphore's permits where a read-write
// lock was asked for. ErrInvalidArgument means a key, option or argument
// was refused before anything was sent to Redis. Any other error from
// Obtain is a Redis failure: mostly, Redis did not answer, or not in
// time, so nobody knows whether the lock is free, and the caller decides,
// on purpose, whether to skip the work (fail closed) or do it without the
// lock (fail open).
//
// # Guarantees and limits
//
// With a single Redis server that keeps its data, at most one Lock holds a
// key at a time, and its holder may rely on it until Lock.Deadline: the TTL
// minus a drift allowance (TTL/100 + 2ms by default) that covers clocks
// running at slightly different rates. The package cannot protect against a
// holder that is paused (by GC, SIGSTOP or an overloaded host) past its
// Deadline: it cannot observe the loss in time and may act while the next
// holder does. Nor does a lock survive a Redis restart without persistence,
// an eviction, or a failover to a replica that had not yet received the key.
// A lock therefore reduces concurrent work; it does not make work run
// exactly once. Make the protected work idempotent (Once records each job's
// completion), and let the resource reject stale holders with fencing
// tokens (WithFencing, Lock.Fence). WithReplicas makes an acquire wait
// until replicas have the lock, so that it survives a failover to one of
// them.
package locksmith
