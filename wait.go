package locksmith

import (
	"context"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith/internal/notify"
)

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

// The same waiting serves semaphores (see semaphore.go), whose permits
// are never handed over: a release announces that a permit is free, and
// the head of each Locker's queue tries for it.

// The subscriptions, the queues and what an announcement does to them
// are the Locker's notifier (see internal/notify); wait drives one waiter
// through its queue.

// An attempter makes the attempts of one waiting call, for a lock or for a
// permit of a semaphore.
type attempter interface {
	// attempt makes one attempt for w, as tryObtain does.
	attempt(ctx context.Context, w *notify.Waiter) (*Lock, acquireRes, error)
	// handedOver returns what a release handed to w, as h announced,
	// counting its validity from since.
	handedOver(ctx context.Context, w *notify.Waiter, h *notify.Handoff, since time.Time) (*Lock, error)
	// leave takes w out of its queue as its call returns.
	leave(ctx context.Context, w *notify.Waiter)
	// busy is the error when the strategy gives up: what w waits for is
	// still held by others.
	busy() error
}

// lockAttempts are the attempts of an Obtain call on key (rkey in Redis).
// It keeps a copy of the call's config, made only for a call that waits,
// so that a call that does not keeps its config on the stack.
type lockAttempts struct {
	l         *Locker
	key, rkey string
	cfg       config
}

func (a *lockAttempts) attempt(ctx context.Context, w *notify.Waiter) (*Lock, acquireRes, error) {
	return a.l.tryObtain(ctx, a.key, a.rkey, &a.cfg, scripted, w.Token(), w.Queues())
}

func (a *lockAttempts) handedOver(ctx context.Context, w *notify.Waiter, h *notify.Handoff, since time.Time) (*Lock, error) {
	return a.l.handedOver(ctx, a.key, a.rkey, &a.cfg, w, h, since)
}

func (a *lockAttempts) leave(ctx context.Context, w *notify.Waiter) {
	a.l.leave(ctx, a.key, a.rkey, &a.cfg, w)
}

func (a *lockAttempts) busy() error { return heldElsewhere(a.key) }

// wait makes waiter w's attempts, through a, until it obtains what it
// waits for on key, the strategy gives up, or ctx ends. The first retry
// slot ends after delay. tr is what the call tried before; wait returns
// it with its own attempts added.
func (l *Locker) wait(ctx context.Context, key string, a attempter, backoff Backoff, delay time.Duration, w *notify.Waiter,
	tr tries) (*Lock, tries, error) {
	defer a.leave(ctx, w)
	slotEnd := time.Now().Add(max(delay, 0))
	timer := time.NewTimer(time.Until(slotEnd))
	defer timer.Stop()
	for {
		if l.notify.IsClosed() {
			return nil, tr, closedErr(key)
		}
		if h, since := l.notify.TakeHandoff(w); h != nil {
			tr.handedOver = true
			lk, err := a.handedOver(ctx, w, h, since)
			return lk, tr, err
		}
		tryNow, tryAt, head := l.notify.Plan(w)
		if !tryNow {
			wakeAt := slotEnd
			if !tryAt.IsZero() && tryAt.Before(wakeAt) {
				wakeAt = tryAt
			}
			timer.Reset(time.Until(wakeAt))
			select {
			case <-ctx.Done():
				return nil, tr, notObtained(ctx, key)
			case <-w.Wake():
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
					return nil, tr, a.busy()
				}
				slotEnd = now.Add(max(d, 0))
				continue
			}
		}
		start := time.Now()
		l.notify.Sending(w)
		lk, res, err := a.attempt(ctx, w)
		tr.attempts++
		if err != nil {
			if res.cleaned {
				// Withdrawn already: leave need not send it again (nor
				// wait as long again for an unreachable Redis).
				l.notify.Withdrawn(w)
			}
			return nil, tr, err
		}
		l.notify.Observe(time.Since(start))
		if lk != nil {
			// A release may have handed the lock over before its
			// announcement reached this Locker (one heard returns
			// above): the attempt found it holding w's token already.
			tr.handedOver = res.mine
			l.notify.Won(w, lk.Deadline(), res.more)
			return lk, tr, nil
		}
		l.notify.Lost(w, res.attempt(), start)
		// The strategy's budget is its delays: an attempt made within a
		// slot, because of an announcement or the holder's TTL, leaves
		// the slot running; one at or after its end starts the next.
		if now := time.Now(); !now.Before(slotEnd) {
			d, ok := backoff.Next()
			if !ok {
				return nil, tr, a.busy()
			}
			slotEnd = now.Add(max(d, 0))
		}
	}
}

// closedErr is the error of a waiter of key whose Locker was closed.
func closedErr(key string) error {
	return fmt.Errorf("%w: obtaining %q", ErrClosed, key)
}

// attempt returns what a refused attempt learned of the holders, for the
// notifier.
func (r acquireRes) attempt() notify.Attempt {
	return notify.Attempt{HolderTTL: r.holderTTL, Holder: r.holder, PeersHolding: r.peersHolding}
}

// noAttempt is what a waiter that joins without an attempt knows.
var noAttempt = notify.Attempt{HolderTTL: -1}
