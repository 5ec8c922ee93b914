package locksmith

import (
	"context"
	"time"
)

// The store seam: what the lock machinery asks of a Redis deployment
// (one server, Sentinel or Cluster: store_redis.go; a quorum: quorum.go).
// The scripts it runs, and how they are sent, are in scripts.go.

// obtainCall returns the variant of the acquire script (see
// obtainScripts) for an attempt on ref, queued or not, and its arguments,
// prepared for send: the keys that variant is given, then argv.
func obtainCall(ref *lockRef, queued bool, argv ...any) (luaScript, []any) {
	args := make([]any, 4, 3+3+len(argv))
	args[3] = ref.lockKey
	variant := 0
	if queued {
		args = append(args, ref.queue)
		variant += 2
	}
	if ref.fenced() {
		args = append(args, ref.fence)
		variant++
	}
	args[2] = len(args) - 3
	script := obtainScripts[variant]
	return script, script.prepare(append(args, argv...))
}

// pttlNotHeld is what lock_pttl.lua returns when the caller does not hold the lock.
const pttlNotHeld = -3

// A store runs the lock primitives against one Redis deployment. Each
// method touches one lock (with its companion keys, in the same cluster
// slot) in one round trip (two when the server first answers NOSCRIPT,
// or when a waiting caller's first plain SET finds the lock taken: see
// acquireMode), and reports a Redis failure as an error, never as the
// lock being held or not held. It is the seam behind which other
// deployments (a quorum of independent servers) can stand; what only one
// deployment can serve is on extras, which a quorum does not implement.
type store interface {
	handleStore
	// acquire runs one attempt to take a lock, as acquireReq describes.
	acquire(ctx context.Context, req acquireReq) (acquireRes, error)
	// allows returns nil when the deployment can serve a call u, and
	// otherwise an error matching ErrInvalidArgument that says why;
	// nothing is sent either way. It refuses every call that needs
	// extras from a store that has none.
	allows(u usage) error
	// queues reports whether waiters are queued in Redis for a direct
	// handoff (see handoff.go), which takes a queue key beside each lock.
	queues() bool
	// check returns the commands that calls with needs n on the lock
	// named by k need and the connected user may not run, changing
	// nothing.
	check(ctx context.Context, k Keys, n need) (refused []string, err error)
	// close stops and waits for the goroutines the store started, for
	// Locker.Close; the store still serves calls after it.
	close()
}

// extras is what the store of one deployment (one server, Sentinel or
// Cluster) serves beyond store: what a quorum cannot honour (see
// quorumStore.allows). A Locker keeps it beside its store, set by New and
// nil on a quorum; allows refuses the calls that need it before they
// reach it.
type extras interface {
	// confirm and confirmPermit confirm a lock and a permit handed to a
	// queued waiter (see the handoff of its kind, in attempt.go): they
	// reset the TTL of the hold of ref's token, if it is held, and return
	// the fencing token it is held with (see lock_confirm.lua and
	// permit_confirm.lua); ok is false when it is not held. Only a store
	// that queues waiters hands holds over.
	confirm(ctx context.Context, ref lockRef, ttl time.Duration) (ok bool, fence int64, err error)
	confirmPermit(ctx context.Context, ref lockRef, ttl time.Duration) (ok bool, fence int64, err error)
	// acquirePermit runs one attempt to take a permit of a semaphore, as
	// permitReq describes; a refused attempt reports how long until the
	// earliest permit expires as the holder's TTL.
	acquirePermit(ctx context.Context, req permitReq) (acquireRes, error)
	// permits returns what the handles of permits run on.
	permits() handleStore
	// inspectPermits reads a semaphore's state for Semaphore.Inspect.
	inspectPermits(ctx context.Context, k Keys) (rawPermits, error)
	// acquireRW runs one attempt to take a read or write hold of a
	// read-write lock; rwHandles returns what their handles run on, and
	// inspectRW reads a read-write lock's state for RWMutex.Inspect.
	acquireRW(ctx context.Context, ref lockRef, ttlMS any, intent bool) (acquireRes, error)
	rwHandles() handleStore
	inspectRW(ctx context.Context, k Keys) (rawRW, error)
	// record, complete and inspect serve Once, Completed and Inspect (see
	// onceStore and inspectStore).
	onceStore
	inspectStore
	// leader reads an election's leader (see election_leader.lua); proclaim sets
	// the value of the leader holding ref (see election_proclaim.lua), and
	// reports whether it still held it; news announces msg, which starts
	// with notify.NewsMark, on the channel ch.
	leader(ctx context.Context, k Keys) (rawLeader, error)
	proclaim(ctx context.Context, ref lockRef, value string) (bool, error)
	news(ctx context.Context, ch, msg string) error
	// acquireSet runs one attempt to take every lock of a set, and
	// setHandles returns what the handle of a set runs on (see
	// store_multi.go); sharded reports whether the deployment is Redis
	// Cluster, where a set must lie in one slot.
	acquireSet(ctx context.Context, set *lockSet, req setReq) (setRes, error)
	setHandles(set *lockSet) handleStore
	sharded() bool
}

// handleStore is what the handle of a hold (a Lock: a lock, a permit of a
// semaphore, a hold of a read-write lock) runs on.
type handleStore interface {
	// release hands the lock to the first of its queued waiters, or
	// deletes it, if it holds the token, announces which to waiters in the
	// same step, and reports whether it did.
	release(ctx context.Context, ref lockRef) (bool, error)
	// withdraw is release for a queued waiter that gives up: when the
	// lock does not hold the token (it was not handed to the waiter),
	// it removes the waiter's queue entry, made with ttlMS.
	withdraw(ctx context.Context, ref lockRef, ttlMS int64) (bool, error)
	// refresh sets the lock's TTL if it holds the token, and reports
	// whether it did.
	refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error)
	// pttl returns the lock's remaining TTL if it holds the token.
	pttl(ctx context.Context, ref lockRef) (ttl time.Duration, held bool, err error)
}

// usage is what a call asks of a store, for store.allows: a value, so
// that asking does not make the call's config escape.
type usage struct {
	kind     callKind
	fencing  bool
	replicas int
}

// usage returns what a call of kind k with c asks of the store.
func (c *config) usage(k callKind) usage {
	return usage{kind: k, fencing: c.fencing, replicas: c.replicas}
}

// callKind is the kind of call a store is asked to serve: see
// store.allows.
type callKind int

const (
	callLock      callKind = iota // Obtain, WithLock
	callOnce                      // Once, Completed
	callInspect                   // Inspect
	callSemaphore                 // a Semaphore's Acquire, WithPermit
	callRW                        // an RWMutex's calls
	callElection                  // an Election's calls
)

// lockRef names one acquisition of a lock to a store: its lock key, its
// handoff queue (see handoff.go), and its fence counter; token is the value
// that marks this acquisition. The token and the lock key (lockKey) are
// also kept as interface values because go-redis takes arguments as such:
// converting once per lock, not once per command, saves an allocation per
// command.
type lockRef struct {
	key   string // the lock key
	queue string // its handoff queue; "" where waiters are not queued (a quorum)
	fence string // its fence counter; "" without fencing
	// leader is an election's proclaimed value (see Term.Proclaim); ""
	// for any other lock. An election's lock has a queue and a fence.
	leader string

	lockKey any
	token   any
	// channel is the channel on which the release is announced (a
	// string), and fenceTTLMS how long the fence counter lives after a
	// token was taken, in ms (an int64, 0 for ever).
	channel    any
	fenceTTLMS any
}

// fenced reports whether the lock takes fencing tokens.
func (r *lockRef) fenced() bool { return r.fence != "" }

// acquireReq is one attempt to take a lock: set the lock key to token with
// the TTL if it is free (or already holds token), then, with fencing, take
// the next fencing token from the counter, and, if replicas is not zero,
// wait up to replicaWait for that many replicas to acknowledge. When queue
// is set and the lock is taken, the caller is queued in the handoff queue.
type acquireReq struct {
	lockRef
	ttl         time.Duration
	ttlMS       any // ttl in whole milliseconds, an int64
	replicas    int
	replicaWait time.Duration
	queue       bool
	// mode chooses the commands; the plain ones apply only without
	// fencing or replicas.
	mode acquireMode
	// setArgs, when not nil, are the arguments of the plain mode's SET NX
	// PX laid out once by setNXArgs, which the masters of a quorum share
	// (go-redis only reads a command's arguments); nil: each store lays
	// them out.
	setArgs []any
}

// acquireMode chooses how an attempt is sent. A plain SET costs the server
// a fraction of what the script costs (about 2µs against 10µs on Redis
// 7.0), but tells less.
type acquireMode int

const (
	// scripted runs the acquire script: one round trip that reports the
	// holder's TTL when the lock is taken.
	scripted acquireMode = iota
	// plainOnce sends SET NX PX and, when the key is taken, reads the
	// holder's token, which tells a resend of this very call from another
	// holder: one cheap round trip for a free lock, two for a taken one
	// (one on a quorum, which runs lock_try.lua, both in one script); it
	// does not learn the holder's TTL. For callers that will not wait.
	plainOnce
	// plainFirst sends SET NX PX and, when the key is taken, the script:
	// one cheap round trip for a free lock, two for a taken one; for the
	// first attempt of a caller that may wait.
	plainFirst
)

// acquireRes is the outcome of an acquireReq: either ok, with the fence
// (0 without fencing) and the number of replicas that acknowledged, or not,
// with the holder's remaining TTL, negative when its key has no expiry,
// and, for a queued attempt, the holder's token.
type acquireRes struct {
	ok bool
	// more is set, with ok, when a shared hold was taken and more may be
	// free (another permit, room for more readers).
	more      bool
	fence     int64
	acked     int
	holderTTL time.Duration
	holder    string
	// peersHolding are the tokens, among the peers a refused attempt
	// for a permit named (see notify.Notifier.PeersQueued), that hold one.
	peersHolding []string
	// mine is set, with ok, when a queued attempt found the lock holding
	// the caller's token already: a release handed it over and the
	// caller had not heard the announcement yet (or, rarely, an earlier
	// delivery of the same attempt took it).
	mine bool
	// outOfService is set, without ok, when the restart guard refused the
	// attempt (see store_guard.go): a *RestartError, or on a quorum the
	// errors of the masters left out, joined; holderTTL is then how long
	// until the attempt can count, negative when unknown.
	outOfService error
	// cleaned is set, with an error, when the attempt's token was already
	// deleted from the lock and the queue (see deleteIfOwned), so that
	// nothing need withdraw it again.
	cleaned bool
}

// landedError marks a failure after which the lock may hold the caller's
// token: a script that failed after some of its writes (Redis does not
// undo them; an error reply to a single command, by contrast, means it did
// nothing).
type landedError struct{ err error }

func (e landedError) Error() string { return e.err.Error() }

func (e landedError) Unwrap() error { return e.err }
