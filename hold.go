package locksmith

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/notify"
)

// Holds that others may share: a permit of a semaphore, a read or write
// hold of a read-write lock. They are acquired, waited for and held the
// same way, through a *Lock handle; a holdKind says what differs.

// A holdKind is one kind of shared hold.
type holdKind interface {
	// take sends one attempt to take a hold for ref, by a caller that
	// waits if it fails, when waiting is set. peers are the tokens of the
	// caller's fellow waiters that a release may have handed the hold to
	// unheard (see Notifier.PeersQueued): a kind whose holds are handed
	// over reports those of them that hold one.
	take(ctx context.Context, st extras, ref lockRef, cfg *config, waiting bool, peers []string) (acquireRes, error)
	// handles returns what the handles of such holds run on.
	handles(st extras) holdStore
	// member returns the value that marks the hold of token in Redis.
	member(token string) string
	// needs returns what the calls need of the Redis user.
	needs(cfg *config) need
	// queued reports whether a waiting attempt leaves a mark in Redis
	// (a waiting writer's intent, a permit's handoff queue entry) that
	// lapses unless the waiter renews it, as a queued waiter for a lock
	// does.
	queued() bool
	// handsOver reports whether a release hands such a hold to a queued
	// waiter, as a lock's does (a permit: see permit_release.lua).
	handsOver() bool
	// busy is the error of a caller that found the hold taken and did
	// not wait, or whose strategy gave up.
	busy(key string) error
	// hold is what its events call it.
	hold() Hold
}

// fenceNeed is needFence with fencing, and nothing without.
func fenceNeed(cfg *config) need {
	if cfg.fencing {
		return needFence
	}
	return 0
}

// holdAttempts are the attempts of one call for a shared hold on key: its
// attempter.
type holdAttempts struct {
	l         *Locker
	key, rkey string
	cfg       config
	kind      holdKind
	// waiting is set when the call waits if its attempts fail.
	waiting bool
}

func newHoldAttempts(l *Locker, key string, cfg *config, kind holdKind) *holdAttempts {
	return &holdAttempts{l: l, key: key, rkey: cfg.prefix + key, cfg: *cfg, kind: kind}
}

// acquireHold takes the hold a describes: one attempt when the strategy
// gives no delay, otherwise waiting as Obtain does (see wait.go). It
// reports the call to the observer and the tracer, if there are any.
func (l *Locker) acquireHold(ctx context.Context, a *holdAttempts) (*Lock, error) {
	if !l.hooked() {
		lk, _, err := l.acquireCounted(ctx, a)
		return lk, err
	}
	h := a.kind.hold()
	ctx, s := l.span(ctx, Call{Op: OpObtain, Key: a.key, Prefix: a.cfg.prefix, Hold: h})
	start := time.Now()
	lk, tr, err := l.acquireCounted(ctx, a)
	l.obtained(a.key, a.cfg.prefix, h, start, tr, lk, err)
	s.end(Outcome{Err: err, Attempts: tr.attempts, HandedOver: tr.handedOver})
	return lk, err
}

// acquireCounted is acquireHold, and also returns what it tried.
func (l *Locker) acquireCounted(ctx context.Context, a *holdAttempts) (*Lock, tries, error) {
	if ctx.Err() != nil {
		return nil, tries{}, notObtained(ctx, a.key)
	}
	cfg := &a.cfg
	needs := a.kind.needs(cfg)
	if a.queues() {
		needs |= needQueue
	}
	if err := l.verifyNeeds(ctx, cfg.prefix, a.key, needs); err != nil {
		return nil, tries{}, err
	}
	backoff := newBackoff(cfg.retry)
	delay, wait := backoff.Next()
	if !wait {
		lk, _, err := a.try(ctx, uuid.NewString(), nil)
		if lk == nil && err == nil {
			err = a.busy()
		}
		return lk, tries{attempts: 1}, err
	}
	a.waiting = true
	ch := keyslot.Companion(cfg.prefix, a.key, keyslot.Released)
	t := l.notify.Ticket(ch)
	if t.Queued {
		// Others of this Locker wait already: queue up behind them.
		w := l.notify.Join(ctx, ch, t, noAttempt, uuid.NewString(), a.kind.queued(), true, time.Time{})
		return l.wait(ctx, a.key, a, backoff, delay, w, tries{})
	}
	token := uuid.NewString()
	start := time.Now()
	lk, res, err := a.try(ctx, token, nil)
	if lk != nil || err != nil {
		return lk, tries{attempts: 1}, err
	}
	w := l.notify.Join(ctx, ch, t, res.attempt(), token, a.kind.queued(), true, start)
	return l.wait(ctx, a.key, a, backoff, delay, w, tries{attempts: 1})
}

// try makes one attempt with token, asking about peers (see
// holdKind.take).
func (a *holdAttempts) try(ctx context.Context, token string, peers []string) (*Lock, acquireRes, error) {
	lk := a.newHandle(token)
	start := time.Now()
	res, err := a.kind.take(ctx, a.l.extras, lk.ref, &a.cfg, a.waiting, peers)
	return settle(ctx, a.key, &a.cfg, lk, start, res, err)
}

// newHandle makes the handle of a hold with token.
func (a *holdAttempts) newHandle(token string) *Lock {
	cfg := &a.cfg
	lk := &Lock{store: a.kind.handles(a.l.extras), key: a.key, token: token, cfg: *cfg, ttl: cfg.ttl, hold: a.kind.hold()}
	lk.ref = lockRef{key: a.rkey, lockKey: a.rkey, token: a.kind.member(token), fenceTTLMS: cfg.fenceTTLMS,
		channel: keyslot.Companion(cfg.prefix, a.key, keyslot.Released)}
	if a.queues() {
		lk.ref.queue = keyslot.Companion(cfg.prefix, a.key, keyslot.Queue)
	}
	if cfg.fencing {
		lk.ref.fence = keyslot.Companion(cfg.prefix, a.key, keyslot.Fence)
	}
	return lk
}

func (a *holdAttempts) attempt(ctx context.Context, w *notify.Waiter) (*Lock, acquireRes, error) {
	var peers []string
	if a.queues() {
		peers = a.l.notify.PeersQueued(w)
	}
	return a.try(ctx, w.Token(), peers)
}

// queues reports whether the holds of a are handed over to queued
// waiters: permits, where the store queues waiters (not a quorum).
func (a *holdAttempts) queues() bool {
	return a.kind.handsOver() && a.l.store.queues()
}

// handedOver returns the hold a release handed to w, as h announced (a
// permit: the other kinds' releases announce nothing that names a
// waiter).
func (a *holdAttempts) handedOver(ctx context.Context, w *notify.Waiter, h *notify.Handoff, since time.Time) (*Lock, error) {
	if !a.queues() {
		return nil, fmt.Errorf("locksmith: %q: this kind of hold is not handed over", a.key)
	}
	return a.l.claimHandoff(ctx, a.key, &a.cfg, a.newHandle(w.Token()), a.l.extras.confirmPermit, w, h, since)
}

func (a *holdAttempts) leave(ctx context.Context, w *notify.Waiter) {
	if a.l.notify.Leave(w) {
		deleteIfOwned(ctx, a.newHandle(w.Token()))
	}
}

func (a *holdAttempts) busy() error { return a.kind.busy(a.key) }
