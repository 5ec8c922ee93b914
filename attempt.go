package locksmith

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/notify"
)

// One attempt of an acquisition, and cleaning up after it: what acquire.go
// repeats until it wins, and what each kind of hold supplies to it.

// A kind is what one primitive acquires: a lock (lockKind, below), an
// election's term (election.go), a permit of a semaphore (semaphore.go),
// a read or a write hold of a read-write lock (rwmutex.go). Each is
// acquired, waited for and held the same way, through a *Lock handle
// (see acquire.go); a kind says only what differs. Its methods take no
// *config: a kind reads the call's options from the handle's copy, so that
// a call that does not wait keeps its config on the stack.
type kind interface {
	// hold is what its events call it.
	hold() Hold
	// needs returns what its calls need of the Redis user, besides the
	// fence counter (WithFencing) and the handoff queue (handsOver).
	needs() need
	// handle completes lk, a new handle whose key, token, config and
	// release channel are set: the store that its methods run on, and
	// what its scripts need besides.
	handle(st stores, lk *Lock)
	// take sends one attempt for lk, the way mode says (a lock's: see
	// acquireMode). queue is set for an attempt that leaves a mark in
	// Redis (see queues). peers are the tokens of the caller's fellow
	// waiters that a release may have handed a shared hold to unheard
	// (see Notifier.PeersQueued): a kind whose holds are handed over
	// reports those of them that hold one.
	take(ctx context.Context, st stores, lk *Lock, mode acquireMode, queue bool, peers []string) (acquireRes, error)
	// queues reports whether the attempts of a caller that waits, with
	// replicas (WithReplicas), leave a mark in Redis that lapses unless
	// the waiter renews it: an entry in the handoff queue, a waiting
	// writer's intent.
	queues(st stores, replicas int) bool
	// handoff returns how a hold that a release on st handed to a queued
	// waiter is confirmed (see handoff.go), or nil when releases on st
	// never hand such a hold over.
	handoff(st stores) handoff
	// shares reports whether such a hold is one of several that may be
	// held on its key at once (a permit, a read or write hold): a win
	// that finds more free wakes the next waiter.
	shares() bool
	// busy is the error of a caller that found the hold taken and did not
	// wait, or whose strategy gave up.
	busy(key string) error
}

// stores are what a kind's attempts and handles run on: the store of every
// deployment, and the extras of one server (nil on a quorum, whose allows
// refuses every call that would need them before anything is sent).
type stores struct {
	core   store
	extras extras
}

// stores returns what l's kinds run on.
func (l *Locker) stores() stores { return stores{core: l.store, extras: l.extras} }

// A handoff confirms a hold that a release handed to a queued waiter and
// that the waiter heard of late, with the extras' confirm or
// confirmPermit.
type handoff interface {
	confirm(ctx context.Context, ex extras, ref lockRef, ttl time.Duration) (ok bool, fence int64, err error)
}

// lockHandoff and permitHandoff are the handoffs of a lock and a permit.
type (
	lockHandoff   struct{}
	permitHandoff struct{}
)

func (lockHandoff) confirm(ctx context.Context, ex extras, ref lockRef, ttl time.Duration) (bool, int64, error) {
	return ex.confirm(ctx, ref, ttl)
}

func (permitHandoff) confirm(ctx context.Context, ex extras, ref lockRef, ttl time.Duration) (bool, int64, error) {
	return ex.confirmPermit(ctx, ref, ttl)
}

// lockKind is a lock's kind: held by one owner at a time, handed over to
// a queued waiter on release.
type lockKind struct{}

func (lockKind) hold() Hold   { return HoldLock }
func (lockKind) needs() need  { return needLock }
func (lockKind) shares() bool { return false }

func (lockKind) handle(st stores, lk *Lock) {
	lk.store = st.core
	if st.core.queues() && lk.fencing {
		lk.ref.fence = keyslot.Companion(lk.cfg.prefix, lk.key, keyslot.Fence)
	}
}

func (lockKind) take(ctx context.Context, st stores, lk *Lock, mode acquireMode, queue bool, _ []string) (acquireRes, error) {
	cfg := &lk.cfg
	return st.core.acquire(ctx, acquireReq{lockRef: lk.ref, ttl: cfg.ttl, ttlMS: cfg.ttlMS, replicas: cfg.replicas,
		replicaWait: cfg.replicaWait, mode: mode, queue: queue})
}

// queues: quorums and locks that wait for replicas are not queued (see
// handoff.go).
func (lockKind) queues(st stores, replicas int) bool { return st.core.queues() && replicas == 0 }
func (lockKind) busy(key string) error               { return heldElsewhere(key) }

func (lockKind) handoff(st stores) handoff {
	if !st.core.queues() {
		return nil
	}
	return lockHandoff{}
}

func heldElsewhere(key string) error {
	return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, key)
}

// An acquisition is one call's attempts to acquire a hold of kind on key
// (rkey in Redis), with a copy of the call's config. (A pointer to the
// caller's would escape, with kind, through kind's methods: the copy keeps
// the caller's on the stack.)
type acquisition struct {
	l         *Locker
	key, rkey string
	kind      kind
	cfg       config
	// w is the call's place in its key's queue, once it waits.
	w *notify.Waiter
	// channel is the key's release channel, boxed once for the handles of
	// a call that waits (see newHandle); nil for one that tries once.
	// queue is its handoff queue's name, made with it.
	channel any
	queue   string
}

// An acquisition that waits is a place (see wait, in acquire.go).
var _ place = (*acquisition)(nil)

func (a *acquisition) name() string                                    { return a.key }
func (a *acquisition) wake() <-chan struct{}                           { return a.w.Wake() }
func (a *acquisition) plan() (tryNow bool, tryAt time.Time, head bool) { return a.l.notify.Plan(a.w) }
func (a *acquisition) refused(last acquireRes) error                   { return refusedErr(a.kind, a.key, last) }

func (a *acquisition) won(lk *Lock, res acquireRes) {
	a.l.notify.Won(a.w, lk.Deadline(), res.more)
}

func (a *acquisition) lost(res acquireRes, sent time.Time) {
	a.l.notify.Lost(a.w, res.attempt(), sent)
}

func (a *acquisition) failed(res acquireRes) {
	if res.cleaned {
		// Withdrawn already: leave need not send it again (nor wait as
		// long again for an unreachable Redis).
		a.l.notify.Withdrawn(a.w)
	}
}

// newToken returns a new token for an acquisition with cfg: a random
// UUID, followed, for an election's campaign, by a space and the
// candidate's value (see election.go).
func newToken(cfg *config) string {
	if cfg.election {
		return randomToken() + " " + cfg.value
	}
	return randomToken()
}

// randomToken returns a new random (version 4) UUID in its text form, as
// uuid.NewString does, in one allocation where uuid.NewString makes two:
// crypto/rand.Read fills an array that stays on the stack (since Go 1.24
// it never fails and its buffer does not escape), and only the text is
// allocated.
func randomToken() string {
	var u uuid.UUID
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // the variant of RFC 9562
	return u.String()
}

// try makes one attempt with token, as kind.take describes, its validity
// counted from start, taken by the caller before the attempt. It returns
// the hold, or, when others hold it, what the attempt learned of them
// (their remaining TTL, negative when unknown, and the holder's token if
// the attempt was queued), or an error for anything else.
func (a *acquisition) try(ctx context.Context, start time.Time, mode acquireMode, token string, queue bool, peers []string) (*Lock, acquireRes, error) {
	// The handle is made first: the store's arguments live in it, so that
	// they are built once per attempt.
	lk := a.newHandle(token)
	res, err := a.kind.take(ctx, a.l.stores(), lk, mode, queue, peers)
	return settle(ctx, a.key, &a.cfg, lk, start, res, err)
}

// attempt makes the attempt of the waiting call, once it waits (see
// wait).
func (a *acquisition) attempt(ctx context.Context) (*Lock, acquireRes, error) {
	w := a.w
	a.l.notify.Sending(w)
	var peers []string
	if a.kind.shares() && a.kind.handoff(a.l.stores()) != nil {
		// A lock's attempt learns its holder's token; a shared hold's
		// cannot learn them all, so it asks about these.
		peers = a.l.notify.PeersQueued(w)
	}
	return a.try(ctx, time.Now(), scripted, w.Token(), w.Queues(), peers)
}

// newHandle makes the handle of an acquisition with token.
func (a *acquisition) newHandle(token string) *Lock {
	cfg := &a.cfg
	lk := &Lock{key: a.key, token: token, cfg: cfg.holdConfig, ttl: cfg.ttl, hold: a.kind.hold(), fencing: cfg.fencing}
	lk.ref = lockRef{key: a.rkey, lockKey: a.rkey, token: token, fenceTTLMS: cfg.fenceTTLMS}
	lk.ref.channel = a.channel
	st := a.l.stores()
	switch queued := a.kind.handoff(st) != nil; {
	case queued && lk.ref.channel == nil:
		// Both names in one allocation.
		var channel string
		lk.ref.queue, channel = keyslot.Companions(cfg.prefix, a.key, keyslot.Queue, keyslot.Released)
		lk.ref.channel = channel
	case queued:
		lk.ref.queue = a.queue
	case lk.ref.channel == nil:
		lk.ref.channel = keyslot.Companion(cfg.prefix, a.key, keyslot.Released)
	}
	a.kind.handle(st, lk)
	return lk
}

// settle completes an attempt for lk whose acquire was sent at start and
// answered res or err: it cleans up after a failure that may have landed,
// and checks that a success is still valid and was acknowledged as asked.
func settle(ctx context.Context, key string, cfg *config, lk *Lock, start time.Time, res acquireRes, err error) (*Lock, acquireRes, error) {
	if err != nil {
		var cleaned acquireRes
		if mayHaveLanded(err) {
			deleteIfOwned(ctx, lk)
			cleaned.cleaned = true
		}
		if ctx.Err() != nil {
			// The caller gave up mid-call: report it as such, whatever
			// the client made of the interrupted command.
			return nil, cleaned, notObtained(ctx, key)
		}
		return nil, cleaned, fmt.Errorf("locksmith: obtain %q: %w", key, err)
	}
	if !res.ok {
		return nil, res, nil
	}
	lk.fence = res.fence
	lk.deadline, lk.since = start.Add(cfg.ttl-cfg.driftFor(cfg.ttl)), start
	// (time.Until reads only the monotonic clock: half time.Now's cost.)
	if time.Until(lk.deadline) <= 0 {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, fmt.Errorf("%w: the reply obtaining %q took %v, longer than its validity of %v",
			ErrLockLost, key, time.Since(start), lk.deadline.Sub(start))
	}
	if res.acked < cfg.replicas {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v; released it",
			ErrNotReplicated, res.acked, cfg.replicas, key, cfg.replicaWait)
	}
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, acquireRes{cleaned: true}, notObtained(ctx, key)
	}
	return lk, acquireRes{ok: true, more: res.more, mine: res.mine}, nil
}

// handedOver returns the hold a release handed to the waiting call, once
// it has heard of it and is sure of it.
func (a *acquisition) handedOver(ctx context.Context) (*Lock, bool, error) {
	h, since := a.l.notify.TakeHandoff(a.w)
	if h == nil {
		return nil, false, nil
	}
	lk, err := a.takeHandoff(ctx, a.w, h, since)
	return lk, true, err
}

// takeHandoff returns the hold a release handed to waiter w, as h
// announced, once it is sure of it. Its validity runs from since, when
// w's first queued attempt was sent (see handoff.go).
func (a *acquisition) takeHandoff(ctx context.Context, w *notify.Waiter, h *notify.Handoff, since time.Time) (*Lock, error) {
	st := a.l.stores()
	handed := a.kind.handoff(st)
	if handed == nil {
		return nil, fmt.Errorf("locksmith: %q: this kind of hold is not handed over", a.key)
	}
	key, lk := a.key, a.newHandle(w.Token())
	lk.fence = h.Fence
	lk.ttl = h.TTL
	drift := a.cfg.driftFor(h.TTL)
	lk.deadline, lk.since = since.Add(h.TTL-drift), since
	a.l.notify.Won(w, lk.deadline, false)
	if ctx.Err() != nil {
		deleteIfOwned(ctx, lk)
		return nil, notObtained(ctx, key)
	}
	if time.Until(lk.deadline) < h.TTL/2 {
		// A long wait since the first queued attempt, or an
		// announcement heard late: start the TTL again, from a time
		// known, and learn the fence again. An announcement of a handoff
		// to w's token that expired since (a later release may have
		// handed the lock to the same token again) names that earlier
		// holding's fence, lower than those of the holders in between:
		// its deadline is past, so it always comes here.
		start := time.Now()
		ok, fence, err := handed.confirm(ctx, st.extras, lk.ref, h.TTL)
		switch {
		case err != nil || !ok:
			deleteIfOwned(ctx, lk)
			switch {
			case ctx.Err() != nil:
				return nil, notObtained(ctx, key)
			case err == nil:
				return nil, fmt.Errorf("%w: %q was handed over but expired before it could be refreshed", ErrLockLost, key)
			}
			return nil, fmt.Errorf("locksmith: confirm the handoff of %q: %w", key, err)
		}
		if lk.ref.fenced() {
			lk.fence = fence
		}
		lk.deadline = start.Add(h.TTL - drift)
		if elapsed := time.Since(start); !time.Now().Before(lk.deadline) {
			deleteIfOwned(ctx, lk)
			return nil, fmt.Errorf("%w: the reply confirming the handoff of %q took %v, longer than its validity of %v",
				ErrLockLost, key, elapsed, h.TTL-drift)
		}
	}
	return lk, nil
}

// leave takes the waiting call out of its queue once it returns. A
// waiter that did not get the hold withdraws from the handoff queue,
// releasing the hold if it was handed over meanwhile.
func (a *acquisition) leave(ctx context.Context) {
	if a.l.notify.Leave(a.w) {
		deleteIfOwned(ctx, a.newHandle(a.w.Token()))
	}
}

// mayHaveLanded reports whether a command that failed with err may still
// have taken the lock. A script may have failed after its SET (Redis does
// not undo what a script wrote before an error); an error reply to a
// single command means it did nothing, and a failed dial or an exhausted
// pool means nothing was sent; anything else (timeouts, dropped
// connections, cancellation mid-call) leaves it unknown.
func mayHaveLanded(err error) bool {
	var (
		rerr redis.Error
		oerr *net.OpError
		lerr landedError
	)
	switch {
	case errors.As(err, &lerr):
		return true
	case errors.As(err, &rerr), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, ErrWrongKind):
		return false
	case errors.As(err, &oerr) && oerr.Op == "dial":
		return false
	}
	return true
}

// deleteIfOwned releases lk's hold if its key still holds lk's token, and
// otherwise withdraws lk's token from the handoff queue, where an attempt
// may have put it; on a context that outlives the caller's cancellation
// but is bounded in time. Its error is dropped: the lock expires with its
// TTL anyway, and a queue entry lapses.
func deleteIfOwned(ctx context.Context, lk *Lock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCleanupWait)
	defer cancel()
	_, _ = lk.store.withdraw(ctx, lk.ref, lk.cfg.ttl.Milliseconds())
}

// attempt returns what a refused attempt learned of the holders, for the
// notifier.
func (r acquireRes) attempt() notify.Attempt {
	return notify.Attempt{HolderTTL: r.holderTTL, Holder: r.holder, PeersHolding: r.peersHolding}
}

// noAttempt is what a waiter that joins without an attempt knows.
var noAttempt = notify.Attempt{HolderTTL: -1}
