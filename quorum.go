package locksmith

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Locker whose locks live on a majority of independent
// Redis masters (the Redlock scheme): a lock is held when more than half of
// the masters hold its key with the holder's token. It has the same API as
// a Locker from New, and keeps working while a minority of the masters is
// down or unreachable; with a majority down, every call fails closed.
//
// The masters must be independent: not replicas of each other, not shards
// of one cluster. Give each client a short timeout that it enforces
// (redis.Options.ContextTimeoutEnabled, or a ReadTimeout well under the
// TTL): an attempt asks every master at once and waits for each at most a
// tenth of the TTL (at most 500ms), but a client that ignores its context
// can make a call wait for its own timeouts.
//
//   - Obtain succeeds when a majority took the lock and its validity (the
//     TTL less the time the attempt took and the drift allowance) has not
//     run out; otherwise it deletes the lock on every master it may have
//     reached.
//   - Refresh, and so a Lease, needs a majority; a lease ends with
//     ErrLockLost when fewer than a majority still hold the lock.
//   - Release deletes the lock on every master; it reports ErrNotHeld when
//     fewer than a majority still held it.
//   - TTL reports how long a majority will still hold the lock.
//
// A master that restarts without persistence forgets the locks it held,
// which can let a second holder gather a majority. Keep such a master out
// of service for at least the longest TTL in use before it rejoins (or run
// it with persistence that fsyncs every write).
//
// Fencing (WithFencing) is refused with ErrInvalidArgument: independent
// counters cannot give strictly increasing tokens without a second round
// of writes, and a quorum of clocks is no better. WithReplicas and Once are
// refused too. A release cannot hand the lock over on a majority in one
// step, so waiters are not queued: they are woken by release
// announcements heard on the first master, and try, and the first waiter
// of each Locker also tries at every delay of its strategy, as on one
// server (see Obtain), which catches releases not announced.
//
// New never fails; fewer than one client, a nil client, or an invalid
// option makes every call on the Locker return an error matching
// ErrInvalidArgument.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{cfg: defaultConfig()}
	if len(clients) == 0 {
		l.err = fmt.Errorf("%w: no Redis clients for a quorum", ErrInvalidArgument)
		return l
	}
	q := quorumStore{nodes: make([]scriptStore, len(clients))}
	for i, c := range clients {
		if isNil(c) {
			l.err = fmt.Errorf("%w: Redis client %d of the quorum is nil", ErrInvalidArgument, i)
			return l
		}
		if topologyOf(c).sharded() {
			l.err = fmt.Errorf("%w: Redis client %d of the quorum is a cluster client; a quorum needs independent masters", ErrInvalidArgument, i)
			return l
		}
		q.nodes[i] = newScriptStore(topologyOf(c))
	}
	l.store = q
	l.notify = newNotifier(topologyOf(clients[0]))
	if l.err = l.cfg.apply(opts, &l.boxes); l.err == nil {
		l.err = q.allows(l.cfg.usage(callLock))
	}
	l.observe(opts)
	return l
}

// allows refuses what a quorum cannot honour: fencing, replicas, and the
// records of Once and Inspect.
func (q quorumStore) allows(u usage) error {
	switch {
	case u.kind == callElection:
		return fmt.Errorf("%w: an election on a quorum of masters: its terms' fences must strictly increase, which independent counters cannot give", ErrInvalidArgument)
	case u.fencing:
		return fmt.Errorf("%w: WithFencing on a quorum of masters: independent counters cannot give strictly increasing tokens", ErrInvalidArgument)
	case u.replicas > 0:
		return fmt.Errorf("%w: WithReplicas on a quorum of masters: each master stands alone", ErrInvalidArgument)
	case u.kind == callOnce:
		return fmt.Errorf("%w: Once and Completed on a quorum of masters: a completion record on a majority cannot be written with the release in one step", ErrInvalidArgument)
	case u.kind == callRW:
		return fmt.Errorf("%w: a read-write lock on a quorum of masters: readers counted on each master separately do not exclude a writer of a majority", ErrInvalidArgument)
	case u.kind == callSemaphore:
		return fmt.Errorf("%w: a semaphore on a quorum of masters: permits counted on each master separately do not bound the holders of a majority", ErrInvalidArgument)
	case u.kind == callInspect:
		return fmt.Errorf("%w: Inspect on a quorum of masters: this Locker's store cannot be inspected", ErrInvalidArgument)
	}
	return nil
}

// queues is false: a release cannot hand the lock over on a majority in
// one step.
func (quorumStore) queues() bool { return false }

// errRefusedByAllows is what the quorum's record, complete and inspect
// return: allows refuses their calls first, so they are never reached.
var errRefusedByAllows = fmt.Errorf("%w: not on a quorum of masters", ErrInvalidArgument)

func (quorumStore) record(context.Context, string) (string, bool, error) {
	return "", false, errRefusedByAllows
}

func (quorumStore) complete(context.Context, lockRef, string, string, time.Duration) (bool, error) {
	return false, errRefusedByAllows
}

// confirm is never called: a quorum's waiters are not handed locks.
func (quorumStore) confirm(context.Context, lockRef, time.Duration) (bool, int64, error) {
	return false, 0, errRefusedByAllows
}

func (quorumStore) acquirePermit(context.Context, permitReq) (acquireRes, error) {
	return acquireRes{}, errRefusedByAllows
}

func (quorumStore) inspectPermits(context.Context, Keys) (rawPermits, error) {
	return rawPermits{}, errRefusedByAllows
}

func (quorumStore) acquireRW(context.Context, lockRef, any, bool) (acquireRes, error) {
	return acquireRes{}, errRefusedByAllows
}

func (q quorumStore) rwHandles() holdStore { return q }

func (quorumStore) inspectRW(context.Context, Keys) (rawRW, error) {
	return rawRW{}, errRefusedByAllows
}

func (quorumStore) leader(context.Context, Keys) (rawLeader, error) {
	return rawLeader{}, errRefusedByAllows
}

func (quorumStore) proclaim(context.Context, lockRef, string) (bool, error) {
	return false, errRefusedByAllows
}

func (quorumStore) news(context.Context, string, string) error {
	return errRefusedByAllows
}

// permits and rwHandles are never called: allows refuses semaphores first.
func (q quorumStore) permits() holdStore { return q }

func (quorumStore) inspect(context.Context, []string) (rawStatus, error) {
	return rawStatus{}, errRefusedByAllows
}

// maxNodeWait bounds how long an attempt waits for one master of a quorum.
const maxNodeWait = 500 * time.Millisecond

// quorumStore keeps each lock on a majority of independent masters.
type quorumStore struct {
	nodes []scriptStore
}

var _ store = quorumStore{}

func (q quorumStore) majority() int { return len(q.nodes)/2 + 1 }

// each runs f on every node at once, each with its own deadline of wait,
// and returns when all have returned. The per-node results are in node
// order.
func each[T any](ctx context.Context, q quorumStore, wait time.Duration, f func(context.Context, scriptStore) (T, error)) ([]T, []error) {
	res := make([]T, len(q.nodes))
	errs := make([]error, len(q.nodes))
	// One deadline for all: they start together.
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range q.nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i+1], errs[i+1] = f(ctx, n)
		}()
	}
	// The first master is asked from this goroutine: one goroutine fewer
	// to start and schedule.
	res[0], errs[0] = f(ctx, q.nodes[0])
	wg.Wait()
	return res, errs
}

func nodeWait(ttl time.Duration) time.Duration {
	return max(min(ttl/10, maxNodeWait), time.Millisecond)
}

// quorumError explains why fewer than a majority answered.
func (q quorumStore) quorumError(errs []error) error {
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("master %d: %w", i, err))
		}
	}
	return fmt.Errorf("%d of %d masters failed, a majority needs %d: %w",
		len(failed), len(q.nodes), q.majority(), errors.Join(failed...))
}

func (q quorumStore) acquire(ctx context.Context, req acquireReq) (acquireRes, error) {
	ttl := req.ttl
	res, errs := each(ctx, q, nodeWait(ttl), func(ctx context.Context, n scriptStore) (acquireRes, error) {
		return n.acquire(ctx, req)
	})
	won, lost := 0, 0
	holderTTL := time.Duration(-1)
	for i, r := range res {
		switch {
		case errs[i] != nil:
		case r.ok:
			won++
		default:
			lost++
			if r.holderTTL >= 0 && (holderTTL < 0 || r.holderTTL < holderTTL) {
				holderTTL = r.holderTTL
			}
		}
	}
	if won >= q.majority() {
		return acquireRes{ok: true}, nil
	}
	// Not held: undo what may have landed, on every master that did not
	// answer "held by another".
	q.undo(ctx, req.lockRef, res, errs)
	switch {
	case lost >= q.majority():
		// Another holder has a majority: wait as for any holder.
		return acquireRes{holderTTL: holderTTL}, nil
	case won+lost >= q.majority():
		// Enough masters answered, but the votes split between
		// contenders and nobody has a majority. Everyone undoes and
		// retries; a random pause spreads the retries out.
		return acquireRes{holderTTL: rand.N(nodeWait(ttl))}, nil
	}
	return acquireRes{}, q.quorumError(errs)
}

// undo deletes a failed acquire's lock on the masters where it may have
// landed, in a bounded call that outlives ctx's cancellation.
func (q quorumStore) undo(ctx context.Context, ref lockRef, res []acquireRes, errs []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCleanupWait)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		if errs[i] == nil && !res[i].ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = n.release(ctx, ref)
		}()
	}
	wg.Wait()
}

// count tallies per-node yes/no answers: it returns whether a majority
// said yes, or an error when too many nodes failed for either answer to
// have a majority.
func (q quorumStore) count(yes []bool, errs []error) (bool, error) {
	n, no := 0, 0
	for i, ok := range yes {
		switch {
		case errs[i] != nil:
		case ok:
			n++
		default:
			no++
		}
	}
	switch {
	case n >= q.majority():
		return true, nil
	case no > len(q.nodes)-q.majority():
		return false, nil
	}
	return false, q.quorumError(errs)
}

func (q quorumStore) release(ctx context.Context, ref lockRef) (bool, error) {
	yes, errs := each(ctx, q, maxCleanupWait, func(ctx context.Context, n scriptStore) (bool, error) {
		return n.release(ctx, ref)
	})
	return q.count(yes, errs)
}

// withdraw is release: a quorum's waiters are never queued for a handoff.
func (q quorumStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return q.release(ctx, ref)
}

func (q quorumStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	yes, errs := each(ctx, q, nodeWait(ttl), func(ctx context.Context, n scriptStore) (bool, error) {
		return n.refresh(ctx, ref, ttl)
	})
	return q.count(yes, errs)
}

func (q quorumStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	type answer struct {
		ttl  time.Duration
		held bool
	}
	res, errs := each(ctx, q, maxNodeWait, func(ctx context.Context, n scriptStore) (answer, error) {
		ttl, held, err := n.pttl(ctx, ref)
		return answer{ttl, held}, err
	})
	yes := make([]bool, len(res))
	var ttls []time.Duration
	for i, r := range res {
		yes[i] = r.held
		if errs[i] == nil && r.held {
			ttls = append(ttls, r.ttl)
		}
	}
	held, err := q.count(yes, errs)
	if !held || err != nil {
		return 0, false, err
	}
	// The lock is held while a majority holds it: until the majority-th
	// longest TTL runs out.
	slices.SortFunc(ttls, func(a, b time.Duration) int { return int(b - a) })
	return ttls[q.majority()-1], true, nil
}
