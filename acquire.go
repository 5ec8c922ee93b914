package locksmith

import (
	"context"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/notify"
)

// The one way a hold is acquired: Obtain, WithLock and Once (a lock),
// Election.Campaign (a term), Semaphore.Acquire (a permit) and RWMutex's
// ObtainRead and ObtainWrite (a read or write hold) all come here, each
// with its kind (see attempt.go), once their options are resolved.

// acquire acquires a hold of kind k on key, with cfg, and reports the
// call to the observer and the tracer, if there are any.
func (l *Locker) acquire(ctx context.Context, key string, cfg *config, k kind) (*Lock, error) {
	if !l.hooked() {
		lk, _, err := l.acquireCounted(ctx, key, cfg, k)
		return lk, err
	}
	ctx, s := l.span(ctx, Call{Op: OpObtain, Key: key, Prefix: cfg.prefix, Hold: k.hold()})
	lk, tr, err := l.acquireObserved(ctx, key, cfg, k)
	s.end(Outcome{Err: err, Attempts: tr.attempts, HandedOver: tr.handedOver})
	return lk, err
}

// acquireObserved is acquire without its span (Campaign has its own), and
// also returns what it tried.
func (l *Locker) acquireObserved(ctx context.Context, key string, cfg *config, k kind) (*Lock, tries, error) {
	if !l.hooked() {
		return l.acquireCounted(ctx, key, cfg, k)
	}
	start := time.Now()
	lk, tr, err := l.acquireCounted(ctx, key, cfg, k)
	l.obtained(key, cfg.prefix, k.hold(), start, tr, lk, err)
	return lk, tr, err
}

// acquireCounted is acquire, and also returns what it tried.
func (l *Locker) acquireCounted(ctx context.Context, key string, cfg *config, k kind) (*Lock, tries, error) {
	if ctx.Err() != nil {
		return nil, tries{}, notObtained(ctx, key)
	}
	if err := l.verifyNeeds(ctx, cfg.prefix, key, needsOf(l.stores(), cfg, k)); err != nil {
		return nil, tries{}, err
	}
	a := acquisition{l: l, key: key, rkey: cfg.prefix + key, kind: k, cfg: *cfg}
	// The strategy's first delay decides between trying once and
	// waiting: a strategy that gives none (NoRetry, LimitRetry(s, 0))
	// makes one attempt, which sends one command (two when the lock is
	// taken) and starts nothing.
	backoff := newBackoff(cfg.retry)
	delay, wait := backoff.Next()
	if !wait {
		token := newToken(cfg)
		lk, res, err := a.try(ctx, time.Now(), plainOnce, token, false, nil)
		if lk == nil && err == nil {
			err = refusedErr(k, key, res)
		}
		return lk, tries{attempts: 1}, err
	}
	// See below for how waiting works, and handoff.go for how a release
	// hands the hold to a waiter.
	queue := k.queues(l.stores(), cfg.replicas)
	qn, ch := keyslot.Companions(cfg.prefix, key, keyslot.Queue, keyslot.Released)
	a.channel, a.queue = ch, qn
	t := l.notify.Ticket(ch)
	if t.Queued {
		// Others of this Locker wait already: queue up behind them
		// rather than barge in.
		w := l.notify.Join(ctx, ch, t, noAttempt, newToken(cfg), queue, k.shares(), time.Time{})
		return l.waitAs(ctx, a, w, backoff, delay, tries{})
	}
	// A key this Locker has recently waited for is likely taken: try
	// with the script at once, rather than a plain SET and the script.
	mode := plainFirst
	if t.Existed {
		mode = scripted
	}
	token := newToken(cfg)
	start := time.Now()
	lk, res, err := a.try(ctx, start, mode, token, queue, nil)
	if lk != nil || err != nil {
		return lk, tries{attempts: 1}, err
	}
	w := l.notify.Join(ctx, ch, t, res.attempt(), token, queue, k.shares(), start)
	return l.waitAs(ctx, a, w, backoff, delay, tries{attempts: 1})
}

// waitAs waits as a, with its place w in its key's queue (see wait). It
// takes a by value: a waiting acquisition is a place, and escapes to the
// heap, where acquireCounted's stays on the stack for a call that tries
// once or takes the lock at its first attempt.
func (l *Locker) waitAs(ctx context.Context, a acquisition, w *notify.Waiter, backoff Backoff, delay time.Duration, tr tries) (*Lock, tries, error) {
	a.w = w
	return l.wait(ctx, &a, backoff, delay, tr)
}

// needsOf returns what the calls for holds of kind k with cfg need of the
// Redis user of st.
func needsOf(st stores, cfg *config, k kind) need {
	n := k.needs()
	if k.handoff(st) != nil {
		n |= needQueue
	}
	if cfg.fencing {
		n |= needFence
	}
	return n
}

// newBackoff starts one call's retries; a strategy that returns no Backoff
// retries nothing.
func newBackoff(s RetryStrategy) Backoff {
	if b := s.NewBackoff(); b != nil {
		return b
	}
	return noRetry{}
}

// Waiting for a lock, the way this package does it:
//
// The release script announces every release on a channel of the lock's
// own (PUBLISH in the same script call as the delete or the handoff: see
// handoff.go). A Locker whose Obtain calls wait for a lock subscribes to
// that channel, on one pub/sub connection shared by all of its waiters,
// and keeps them in a FIFO queue per key. Usually the lock is handed to a
// queued waiter, and the announcement names it: its Locker returns the
// lock to it, and every other Locker learns how long the new holder holds
// it. An announcement of a plain release (nobody was queued in Redis)
// wakes only the head of each Locker's queue, which tries once; the others
// stay asleep and send nothing. So however many goroutines wait, each
// Locker sends at most one attempt per release, and a goroutine that has
// waited longest goes first. A new Obtain call on a key that already has
// waiters in this Locker joins the back of the queue without trying, so a
// goroutine that releases and asks again at once cannot barge ahead of
// those already waiting. A head that is not queued in Redis yet (it just
// became the head) tries at once, which queues it.
//
// Not every release is announced: the holder may crash and its key
// expire, someone may delete the key by hand, or another client may
// hold the same key with the plain recipe (SET NX, then a compare-and-
// delete that publishes nothing). Keyspace notifications would tell, but
// they are off by default and cannot be relied on. So the head of each
// Locker's queue also polls: it tries at the end of every delay of its
// retry strategy, and when the holder's remaining TTL, which every failed
// attempt reports, runs out first. An unannounced release is noticed
// within one delay and a round trip, at the cost of one attempt per delay
// per Locker and key, however many goroutines wait; the announcements
// only make the common case faster. While the subscription is not
// confirmed (it is being set up, or its connection dropped and go-redis
// is reconnecting) the head polls the same way, and after the
// subscription is confirmed again it tries once more, at once, to catch
// releases announced while it was down.
//
// The retry strategy keeps its meaning: each delay it returns is a slot in
// which the waiter may try, and the waiter gives up when the strategy
// does. The head tries in every slot, at its end unless an announcement
// woke it sooner; a waiter behind the head lets its slots pass without
// sending anything, since the head would have won before it.

// The same waiting serves every kind of hold (see attempt.go): a
// semaphore's permits, which are handed over too, and a read-write lock's
// holds, which are not: a release announces that a hold is free, and the
// head of each Locker's queue tries for it.

// The subscriptions, the queues and what an announcement does to them
// are the Locker's notifier (see internal/notify); wait drives one call
// through its place in the queues.

// A place is where one call waits: in the queue of its key (an
// acquisition's, in attempt.go), or, for a set of locks, in the queue of
// every key of the set (a setAcquisition's, in multi_acquire.go). wait drives
// either the same way.
type place interface {
	// name is the key that the call's errors name.
	name() string
	// wake returns the channel on which the place is asked to look at
	// its queues again (see notify.Waiter.Wake).
	wake() <-chan struct{}
	// handedOver returns the hold when the handoffs heard since the last
	// call complete it (done), or an error that ends the call.
	handedOver(ctx context.Context) (lk *Lock, done bool, err error)
	// plan says what to do next, as notify.Notifier.Plan does.
	plan() (tryNow bool, tryAt time.Time, head bool)
	// attempt sends one attempt, recording that it is on its way.
	attempt(ctx context.Context) (*Lock, acquireRes, error)
	// won, lost and failed record the outcome of an attempt sent at
	// sent: the hold, a refusal, or an error.
	won(lk *Lock, res acquireRes)
	lost(res acquireRes, sent time.Time)
	failed(res acquireRes)
	// refused is the error of a call whose last attempt was refused as
	// last says, when its strategy gives up.
	refused(last acquireRes) error
	// leave takes the place out of its queues once the call returns,
	// withdrawing what it left in Redis unless it got the hold.
	leave(ctx context.Context)
}

// wait makes the attempts of the call waiting at p until it obtains what
// it waits for, the strategy gives up, or ctx ends. The first retry
// slot ends after delay. tr is what the call tried before; wait returns
// it with its own attempts added.
func (l *Locker) wait(ctx context.Context, p place, backoff Backoff, delay time.Duration, tr tries) (*Lock, tries, error) {
	key := p.name()
	defer p.leave(ctx)
	var last acquireRes // the last refused attempt's outcome, for its error
	slotEnd := time.Now().Add(max(delay, 0))
	timer := time.NewTimer(time.Until(slotEnd))
	defer timer.Stop()
	for {
		if l.notify.IsClosed() {
			return nil, tr, closedErr(key)
		}
		if lk, done, err := p.handedOver(ctx); done || err != nil {
			tr.handedOver = true
			return lk, tr, err
		}
		tryNow, tryAt, head := p.plan()
		if !tryNow {
			wakeAt := slotEnd
			if !tryAt.IsZero() && tryAt.Before(wakeAt) {
				wakeAt = tryAt
			}
			timer.Reset(time.Until(wakeAt))
			select {
			case <-ctx.Done():
				return nil, tr, notObtained(ctx, key)
			case <-p.wake():
				continue
			case <-timer.C:
			}
			now := time.Now()
			slotOver := !now.Before(slotEnd)
			// The head tries at the end of each slot, since a release
			// may not have been announced, and when the holder's TTL has
			// run out (or its queue entry is due for renewal).
			tryNow = (head && slotOver) || (!tryAt.IsZero() && !now.Before(tryAt))
			if !tryNow {
				if !slotOver {
					continue
				}
				// Behind the head: this slot passes without an attempt,
				// which the head would have won first.
				d, ok := backoff.Next()
				if !ok {
					return nil, tr, p.refused(last)
				}
				slotEnd = now.Add(max(d, 0))
				continue
			}
		}
		start := time.Now()
		lk, res, err := p.attempt(ctx)
		tr.attempts++
		if err != nil {
			p.failed(res)
			return nil, tr, err
		}
		l.notify.Observe(time.Since(start))
		if lk != nil {
			// A release may have handed the lock over before its
			// announcement reached this Locker (one heard returns
			// above): the attempt found it holding the call's token.
			tr.handedOver = res.mine
			p.won(lk, res)
			return lk, tr, nil
		}
		last = res
		p.lost(res, start)
		// The strategy's budget is its delays: an attempt made within a
		// slot, because of an announcement or the holder's TTL, leaves
		// the slot running; one at or after its end starts the next.
		if now := time.Now(); !now.Before(slotEnd) {
			d, ok := backoff.Next()
			if !ok {
				return nil, tr, p.refused(last)
			}
			slotEnd = now.Add(max(d, 0))
		}
	}
}

// refusedErr is the error of a call for key whose last attempt was
// refused as res says: the kind's, or, when the restart guard refused it,
// one that matches ErrNotObtained and says which masters stay out, and
// for how long.
func refusedErr(k kind, key string, res acquireRes) error {
	if res.outOfService != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, res.outOfService)
	}
	return k.busy(key)
}
