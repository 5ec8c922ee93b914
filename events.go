package locksmith

import (
	"errors"
	"time"
)

// What an Observer is told: the Event, its kinds and the values of its
// fields.

// An Event is one thing a Locker did. Kind says what; the fields that
// apply to each kind are documented with it, and the others are zero.
// Events never carry a lock's token (nor anything else one could use to
// release or take over a lock): the errors they carry, the package's own
// and Redis's, do not include it.
//
// New kinds of events may be added: an observer should ignore kinds it
// does not know.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Time is when it happened (not when it was delivered).
	Time time.Time
	// Key is the key as given to the call, without the prefix; Prefix is
	// the call's prefix (see WithPrefix). Both are empty for
	// EventSubscriber.
	Key, Prefix string
	// Keys are the keys of a set of locks (ObtainAll, WithLocks, and the
	// events of the set's handle), sorted, without the prefix; Key is
	// then the first of them. Nil for every other call.
	Keys []string
	// Hold says what was obtained, released, renewed or lost: a lock, a
	// permit of a semaphore, a read or write hold of a read-write lock,
	// or a leader's term in an election (obtained by Campaign, released
	// by Resign). It is zero for EventOnce and EventSubscriber.
	Hold Hold
	// Waited is how long an Obtain (or Acquire, ObtainRead, ...) took,
	// from its start to its return, waiting included: EventObtain.
	Waited time.Duration
	// Attempts is how many attempts an EventObtain sent to Redis (0 when
	// it was refused before sending any), or, for an EventSubscriber with
	// ConnUp or ConnReplaced, how many connections were dialed since the
	// last one that came up (1 for a connection that came up at once).
	Attempts int
	// HandedOver is set on an EventObtain whose lock (or permit) was
	// handed over by its holder's release to this waiting call (see
	// Obtain), rather than
	// taken by an attempt: whether the call heard the release's
	// announcement or found the lock its own at its next attempt (a
	// Locker that cannot subscribe, or an announcement still on its way).
	// In a rare case it is set for a lock taken, not handed over: a
	// waiting attempt that took a free lock, lost its reply and was sent
	// again by the client finds the lock its own too.
	HandedOver bool
	// Held is how long the lock was held, from its Obtain until this
	// event: EventRelease, EventRenewal and EventLeaseLost.
	Held time.Duration
	// Once is what a call of Locker.Once did: EventOnce.
	Once OnceResult
	// Conn is the new state of a pub/sub connection, and Node the
	// address of the Redis Cluster master it talks to ("" when not on a
	// cluster): EventSubscriber.
	Conn ConnState
	Node string
	// Err is the error of a call that failed (as the call returned it),
	// the cause of a lost lease, or why a connection went down or was
	// replaced; nil otherwise. Class sorts it; match Err itself with
	// errors.Is.
	Err   error
	Class ErrorClass
	// Dropped is how many events were dropped, because the buffer was
	// full, since the event delivered before this one.
	Dropped uint64
}

// EventKind says what an Event reports. The zero EventKind is not used.
type EventKind uint8

const (
	// EventObtain ends every call of Obtain, WithLock, Semaphore.Acquire,
	// WithPermit, ObtainRead, ObtainWrite, WithReadLock and
	// WithWriteLock, and the obtaining inside Once: Err is nil when it
	// obtained what it asked for. A call refused for its arguments, or
	// because the Locker is closed, reports one too, with no attempts
	// and ClassInvalid or ClassClosed (except Once, which reports such a
	// refusal with its EventOnce only). Key, Prefix, Hold, Waited,
	// Attempts, HandedOver, Err and Class are set.
	EventObtain EventKind = iota + 1
	// EventRelease ends every Release of a handle, including the release
	// at the end of WithLock and the one by which Once records a
	// completion: Err is nil when it deleted the lock, matches ErrNotHeld
	// (ClassNotHeld) when the lock had expired or was taken, and
	// otherwise means Redis could not answer. Key, Prefix, Hold, Held,
	// Err and Class are set.
	EventRelease
	// EventRenewal follows every renewal of a lease: Err is nil when it
	// renewed the lock; otherwise it failed, and is retried until the
	// Deadline unless the lock was found gone (ClassNotHeld), which also
	// ends the lease with an EventLeaseLost. Key, Prefix, Hold, Held, Err
	// and Class are set.
	EventRenewal
	// EventLeaseLost reports a lock lost while leased: its lease
	// contexts are cancelled with Err, which matches ErrLockLost. Key,
	// Prefix, Hold, Held, Err and Class are set.
	EventLeaseLost
	// EventOnce ends every call of Locker.Once: Once says what it did,
	// and Err is the error it returned. Key, Prefix, Once, Err and Class
	// are set.
	EventOnce
	// EventSubscriber reports a change of state of one of the pub/sub
	// connections on which the Locker hears release announcements: Conn,
	// Node and Attempts are set, and Err for ConnDown and ConnReplaced.
	EventSubscriber
)

var eventKindNames = [...]string{"", "obtain", "release", "renewal", "lease-lost", "once", "subscriber"}

// String returns the kind's name in lower case, such as "lease-lost".
func (k EventKind) String() string { return nameOf(eventKindNames[:], int(k)) }

// Hold says what kind of hold an Event is about. The zero Hold means none.
type Hold uint8

const (
	HoldLock   Hold = iota + 1 // a lock, from Obtain
	HoldPermit                 // a permit of a Semaphore
	HoldRead                   // a read hold of an RWMutex
	HoldWrite                  // the write hold of an RWMutex
	HoldTerm                   // a leader's term in an Election, from Campaign
)

var holdNames = [...]string{"", "lock", "permit", "read", "write", "term"}

// String returns the hold's name in lower case, such as "permit".
func (h Hold) String() string { return nameOf(holdNames[:], int(h)) }

// OnceResult is what a call of Locker.Once did. The zero OnceResult means
// none.
type OnceResult uint8

const (
	// OnceSkipped: the job had completed already; fn did not run.
	OnceSkipped OnceResult = iota + 1
	// OnceRan: fn ran but the job was not recorded as done: fn failed,
	// the lock was lost, or the record could not be written. (A call
	// whose fn panics reports no EventOnce: the panic goes on.)
	OnceRan
	// OnceRecorded: fn ran and the completion was recorded.
	OnceRecorded
	// OnceNotRun: fn did not run, and the job is not known to be done:
	// the lock was not obtained, or Redis could not answer.
	OnceNotRun
)

var onceNames = [...]string{"", "skipped", "ran", "recorded", "not-run"}

// String returns the result's name in lower case, such as "skipped".
func (r OnceResult) String() string { return nameOf(onceNames[:], int(r)) }

// ConnState is the state of a pub/sub connection in an EventSubscriber.
// The zero ConnState means none.
type ConnState uint8

const (
	// ConnUp: the server answered on the connection; waiters are woken by
	// announcements. Reported once per connection.
	ConnUp ConnState = iota + 1
	// ConnDown: the connection failed, or stopped answering; waiters poll
	// at their retry delays until one is up again. Reported once per
	// outage, however many connections fail during it.
	ConnDown
	// ConnReplaced: a new connection was dialed in place of one that
	// failed, stopped answering, or (on Redis Cluster) was told that a
	// slot moved.
	ConnReplaced
	// ConnClosed: the connection was closed because no call waits any
	// more, or by Locker.Close.
	ConnClosed
)

var connNames = [...]string{"", "up", "down", "replaced", "closed"}

// String returns the state's name in lower case, such as "down".
func (s ConnState) String() string { return nameOf(connNames[:], int(s)) }

// ErrorClass sorts the error of an Event by the sentinel it matches, for
// counting by outcome. The zero ErrorClass, ClassNone, means no error.
type ErrorClass uint8

const (
	ClassNone          ErrorClass = iota // no error
	ClassNotObtained                     // ErrNotObtained: held elsewhere, the strategy gave up, or ctx ended
	ClassNotHeld                         // ErrNotHeld: the lock had expired or was taken
	ClassLost                            // ErrLockLost
	ClassClosed                          // ErrClosed
	ClassInvalid                         // ErrInvalidArgument, or ErrWrongKind: the key holds another kind of lock
	ClassNoPermission                    // ErrNoPermission
	ClassNotReplicated                   // ErrNotReplicated
	ClassRedis                           // anything else: Redis failed, or could not be reached
	// ClassFunction: the function given to WithLock (or its kin) or Once
	// returned the error, and it matches none of the sentinels above.
	// Only Outcome.Class of an OpWithLock or OpOnce and Event.Class of
	// an EventOnce are set to it; ClassOf, which sees only the error,
	// returns ClassRedis for such an error.
	ClassFunction
)

var classNames = [...]string{"", "not-obtained", "not-held", "lost", "closed", "invalid", "no-permission", "not-replicated", "redis-error", "function-error"}

// String returns the class's name in lower case, such as "redis-error";
// ClassNone's is "".
func (c ErrorClass) String() string { return nameOf(classNames[:], int(c)) }

func nameOf(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return "unknown"
}

// classOf returns the class of err. An error that matches several
// sentinels takes the first of this order: a lost lock is reported as
// lost even when the call's error also says it is not held.
func classOf(err error) ErrorClass {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrWrongKind):
		return ClassInvalid
	case errors.Is(err, ErrClosed):
		return ClassClosed
	case errors.Is(err, ErrNoPermission):
		return ClassNoPermission
	case errors.Is(err, ErrNotReplicated):
		return ClassNotReplicated
	case errors.Is(err, ErrLockLost):
		return ClassLost
	case errors.Is(err, ErrNotObtained):
		return ClassNotObtained
	case errors.Is(err, ErrNotHeld):
		return ClassNotHeld
	}
	return ClassRedis
}
