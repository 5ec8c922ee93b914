package locksmith

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
// which could let a second holder gather a majority. The Locker keeps the
// restart guard on (see WithRestartGuard): a master counts only once it
// has been up for the Locker's maximum TTL (WithMaxTTL; by default the
// Locker's default TTL, and a call asking for a longer TTL is refused
// with ErrInvalidArgument), read from the server itself when each
// connection is made. Until then its answers count for nothing: an
// acquire that needs it fails with an error matching ErrNotObtained and
// ErrRestarted, naming the masters left out and how long each stays out
// (a waiting Obtain waits them out), and its renewals fail there. So a
// deployment just started is unavailable for that long too. Name the
// masters that persist every write (appendfsync always) with
// WithPersistentMaster to let them count at once. Each client must be a
// *redis.Client, and its Redis user allowed INFO.
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
// The Locker asks the masters after the first from goroutines of its own,
// started by its first call; Close stops them and waits for them.
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
	if l.err = l.cfg.apply(opts, &l.boxes); l.err != nil {
		return l
	}
	nodes := make([]redisStore, len(clients))
	for i, c := range clients {
		if isNil(c) {
			l.err = fmt.Errorf("%w: Redis client %d of the quorum is nil", ErrInvalidArgument, i)
			return l
		}
		if topologyOf(c).sharded() {
			l.err = fmt.Errorf("%w: Redis client %d of the quorum is a cluster client; a quorum needs independent masters", ErrInvalidArgument, i)
			return l
		}
		nodes[i] = redisStore{topology: topologyOf(c)}
		var err error
		if nodes[i].guard, err = l.cfg.newGuard(topologyOf(c)); err != nil {
			l.err = fmt.Errorf("quorum client %d: %w", i, err)
			return l
		}
	}
	q := newQuorumStore(nodes)
	l.store = q // and no extras: allows refuses the calls that need them
	l.err = q.allows(l.cfg.usage(callLock))
	l.observe(opts)
	l.notify = l.newNotifier(topologyOf(clients[0]))
	return l
}

// allows refuses what a quorum cannot honour: fencing, replicas, and
// every call that needs the extras of one deployment (semaphores,
// read-write locks, Once and Completed, Inspect, elections), which a
// quorum's Locker does not have.
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

// maxNodeWait bounds how long an attempt waits for one master of a quorum.
const maxNodeWait = 500 * time.Millisecond

// quorumStore keeps each lock on a majority of independent masters.
type quorumStore struct {
	nodes   []redisStore
	helpers *askers
}

var _ store = quorumStore{}

func newQuorumStore(nodes []redisStore) quorumStore {
	return quorumStore{nodes: nodes, helpers: newAskers(nodes)}
}

func (q quorumStore) majority() int { return len(q.nodes)/2 + 1 }

// close stops the goroutines that ask the masters (see askers).
func (q quorumStore) close() { q.helpers.close() }

func nodeWait(ttl time.Duration) time.Duration {
	return max(min(ttl/10, maxNodeWait), time.Millisecond)
}

// rejoined returns how long until n of the masters left out, who stay
// out for out (negative: unknown), have rejoined; negative when unknown.
func rejoined(out []time.Duration, n int) time.Duration {
	slices.SortFunc(out, func(a, b time.Duration) int {
		switch {
		case a < 0 && b >= 0:
			return 1
		case b < 0 && a >= 0:
			return -1
		}
		return int(a - b)
	})
	if n <= 0 || n > len(out) {
		return -1
	}
	return out[n-1]
}

// outError names the masters that the restart guard left out of c, and
// how long each stays out.
func (q quorumStore) outError(c *quorumCall) error {
	var out []error
	for i, a := range c.answers {
		if a.err == nil && a.acquire.outOfService != nil {
			out = append(out, fmt.Errorf("%d: %w", i, a.acquire.outOfService))
		}
	}
	return fmt.Errorf("%d of %d masters restarted too recently to count, a majority needs %d: %w",
		len(out), len(q.nodes), q.majority(), errors.Join(out...))
}

// quorumError explains why fewer than a majority answered c.
func (q quorumStore) quorumError(c *quorumCall) error {
	var failed []error
	for i, a := range c.answers {
		switch {
		case a.err != nil:
			failed = append(failed, fmt.Errorf("master %d: %w", i, a.err))
		case a.acquire.outOfService != nil:
			failed = append(failed, fmt.Errorf("%d: %w", i, a.acquire.outOfService))
		}
	}
	return fmt.Errorf("%d of %d masters failed or were left out, a majority needs %d: %w",
		len(failed), len(q.nodes), q.majority(), errors.Join(failed...))
}

func (q quorumStore) acquire(ctx context.Context, req acquireReq) (acquireRes, error) {
	c := q.helpers.get(askAcquire)
	defer q.helpers.put(c)
	// What a master's acquire sends for req, laid out once for all of
	// them: a quorum takes no fence and waits for no replica (see allows).
	switch req.mode {
	case plainOnce:
		c.args = tryArgs(req)
	case plainFirst:
		req.setArgs = setNXArgs(req)
	}
	c.req = req
	q.each(ctx, nodeWait(req.ttl), c)
	won, lost := 0, 0
	holderTTL := time.Duration(-1)
	var out []time.Duration // how long each master left out stays out; -1: unknown
	for _, a := range c.answers {
		r := a.acquire
		switch {
		case a.err != nil:
		case r.ok:
			won++
		case r.outOfService != nil:
			out = append(out, r.holderTTL)
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
	if won+lost < q.majority() {
		if won+lost+len(out) >= q.majority() {
			// A majority answered but too many of them restarted
			// recently: refused as taken until enough rejoin.
			res := acquireRes{holderTTL: rejoined(out, q.majority()-won-lost), outOfService: q.outError(c)}
			q.undo(ctx, c)
			return res, nil
		}
		err := q.quorumError(c)
		q.undo(ctx, c)
		return acquireRes{}, err
	}
	q.undo(ctx, c)
	if lost >= q.majority() {
		// Another holder has a majority: wait as for any holder.
		return acquireRes{holderTTL: holderTTL}, nil
	}
	// Enough masters answered, but the votes split between contenders
	// and nobody has a majority. Everyone undoes and retries; a random
	// pause spreads the retries out.
	return acquireRes{holderTTL: rand.N(nodeWait(req.ttl))}, nil
}

// undo deletes the lock of the failed acquire c on every master where it
// may have landed (every master that did not answer "held by another"),
// in a bounded call that outlives ctx's cancellation.
func (q quorumStore) undo(ctx context.Context, c *quorumCall) {
	for i := range c.answers {
		a := &c.answers[i]
		a.skip = a.err == nil && !a.acquire.ok
		a.err = nil
	}
	c.op, c.args = askRelease, q.releaseArgs(c.req.lockRef)
	q.each(context.WithoutCancel(ctx), maxCleanupWait, c)
}

// count tallies c's yes/no answers: it returns whether a majority said
// yes, or an error when too many masters failed for either answer to
// have a majority.
func (q quorumStore) count(c *quorumCall) (bool, error) {
	n, no := 0, 0
	for _, a := range c.answers {
		switch {
		case a.err != nil:
		case a.yes:
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
	return false, q.quorumError(c)
}

func (q quorumStore) release(ctx context.Context, ref lockRef) (bool, error) {
	c := q.helpers.get(askRelease)
	defer q.helpers.put(c)
	c.req.lockRef, c.args = ref, q.releaseArgs(ref)
	q.each(ctx, maxCleanupWait, c)
	return q.count(c)
}

// releaseArgs lays out the release script's arguments for ref, the same
// for every master (none is sharded: see NewQuorum), which share them.
func (q quorumStore) releaseArgs(ref lockRef) []any {
	return q.nodes[0].releaseArgs(ref, true)
}

// withdraw is release: a quorum's waiters are never queued for a handoff.
func (q quorumStore) withdraw(ctx context.Context, ref lockRef, _ int64) (bool, error) {
	return q.release(ctx, ref)
}

func (q quorumStore) refresh(ctx context.Context, ref lockRef, ttl time.Duration) (bool, error) {
	c := q.helpers.get(askRefresh)
	defer q.helpers.put(c)
	c.req.lockRef, c.ttl = ref, ttl
	q.each(ctx, nodeWait(ttl), c)
	return q.count(c)
}

func (q quorumStore) pttl(ctx context.Context, ref lockRef) (time.Duration, bool, error) {
	c := q.helpers.get(askPTTL)
	defer q.helpers.put(c)
	c.req.lockRef = ref
	q.each(ctx, maxNodeWait, c)
	held, err := q.count(c)
	if !held || err != nil {
		return 0, false, err
	}
	var ttls []time.Duration
	for _, a := range c.answers {
		if a.err == nil && a.yes {
			ttls = append(ttls, a.ttl)
		}
	}
	// The lock is held while a majority holds it: until the majority-th
	// longest TTL runs out.
	slices.SortFunc(ttls, func(a, b time.Duration) int { return int(b - a) })
	return ttls[q.majority()-1], true, nil
}

// check asks every master, each for at most maxNodeWait, as an attempt
// does. The answer of a majority stands: a master that did not answer
// (down, say) is not asked again on every call until it does.
func (q quorumStore) check(ctx context.Context, k Keys, n need) ([]string, error) {
	c := q.helpers.get(askCheck)
	defer q.helpers.put(c)
	c.keys, c.need = k, n
	q.each(ctx, maxNodeWait, c)
	var refused []string
	failed := 0
	for i, a := range c.answers {
		if a.err != nil {
			failed++
			continue
		}
		for _, what := range a.refused {
			refused = append(refused, fmt.Sprintf("%s on master %d", what, i))
		}
	}
	if failed >= q.majority() {
		return nil, q.quorumError(c)
	}
	return refused, nil
}
