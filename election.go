package locksmith

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/notify"
)

// Leader election: one lock, campaigned for by every candidate, whose
// holder leads. Its token is a random UUID, a space and the candidate's
// value, so that whoever reads the lock (an observer, the handoff
// announcement, redis-cli) learns who leads; a value proclaimed later
// lives beside the lock (Keys.Leader) and ends with it. A term always
// takes a fencing token, and waiting candidates are queued for a direct
// handoff, as lock waiters are: a resigning leader hands the lock to the
// candidate that has waited longest, in the release itself.

// DefaultCampaignDelay is the retry delay of a campaign when no WithRetry
// option is given to Election: a waiting candidate that hears no
// announcement (the leader crashed, or the announcements are refused)
// tries again at least this often, and when the leader's TTL runs out.
const DefaultCampaignDelay = time.Second

// maxValueLen bounds a candidate's value: it travels in every queue entry
// and handoff announcement of the election.
const maxValueLen = 4096

// An Election chooses one leader at a time among the candidates that
// campaign under one name, in any number of processes: the one that runs
// the scheduler, the outbox relay or the cache warmer while it is healthy,
// with another taking over soon after it is not.
//
// Leadership is a lock on the election's name, taken with fencing and
// kept alive by a lease: the leader leads from Campaign's return until
// its Term ends (Resign, or loss), and no other candidate leads before
// the Term's Deadline, under the lock's assumptions (see Lock.Deadline):
// clocks that drift apart by less than the allowance, and a Redis that
// does not lose the key (a restart without persistence, a failover to a
// replica that had not received it). Each term's Fence is higher than
// every earlier term's, so a resource that rejects writes with a lower
// fence than it has seen cannot be written by a leader that lost its
// term while paused or cut off.
//
// Waiting candidates are served in the order they arrived (across
// Lockers, as lock waiters are), a resigning leader hands leadership to
// the one that has waited longest in the same round trip, and a crashed
// leader's term ends with its TTL, after which a candidate takes over
// within the retry delay. An election is not available on a quorum of
// masters (NewQuorum): fences need one counter.
//
// An Election is a small value that holds no state of its own; make one
// with Locker.Election wherever it is needed. Its methods are safe for
// concurrent use.
type Election struct {
	l    *Locker
	name string
	cfg  config
	err  error // an invalid name or option given to Locker.Election
}

// Election returns the election called name, whose lock lives at
// prefix+name with the companions of a lock (see Keys). The options are
// those of Obtain; WithFencing is implied, and the retry strategy, by
// default LinearBackoff(DefaultCampaignDelay) rather than the Locker's,
// sets how often a waiting candidate tries when it hears nothing (see
// Campaign). Like New, it never fails: an invalid name or option makes
// every call on the election return an error matching ErrInvalidArgument,
// before sending anything.
func (l *Locker) Election(name string, opts ...Option) *Election {
	e := &Election{l: l, name: name}
	e.cfg, e.err = l.electionConfig(name, opts)
	return e
}

// electionConfig resolves the options of the election called name.
func (l *Locker) electionConfig(name string, opts []Option) (config, error) {
	if l.err != nil || l.store == nil {
		return config{}, l.usable()
	}
	if err := checkKey(name); err != nil {
		return config{}, err
	}
	if err := lockerOnly(opts); err != nil {
		return config{}, err
	}
	cfg := l.cfg
	cfg.retry = LinearBackoff(DefaultCampaignDelay)
	cfg.fencing = true
	if err := cfg.apply(opts, &l.boxes); err != nil {
		return config{}, err
	}
	if err := l.allows(cfg.usage(callElection), name); err != nil {
		return config{}, err
	}
	cfg.election = true
	return cfg, nil
}

// termKind is an election's term: a lock whose token carries the
// candidate's value (see newToken), and whose fence names the leader.
type termKind struct{ lockKind }

func (termKind) hold() Hold  { return HoldTerm }
func (termKind) needs() need { return needLock | needElection }

func (termKind) handle(st stores, lk *Lock) {
	lockKind{}.handle(st, lk)
	if st.core.queues() && lk.fencing {
		lk.ref.leader = keyslot.Companion(lk.cfg.prefix, lk.key, keyslot.Leader)
	}
}

// Name returns the election's name, without the prefix.
func (e *Election) Name() string { return e.name }

// usable reports why calls on e cannot run.
func (e *Election) usable() error {
	if e.err != nil {
		return e.err
	}
	return e.l.usable()
}

func checkValue(value string) error {
	if len(value) > maxValueLen {
		return fmt.Errorf("%w: a candidate's value of %d bytes; at most %d", ErrInvalidArgument, len(value), maxValueLen)
	}
	return nil
}

// Campaign waits until the caller leads the election, with value as what
// Leader and Observe report of it, and returns its Term. The term lasts
// until it is resigned or lost (see Term.Context); ctx bounds only the
// wait, not the term.
//
// A waiting candidate is woken by the announcement of the leader's
// resignation, which usually hands it leadership directly; it also tries
// when the leader's TTL runs out (a crashed leader) and at every delay of
// the election's retry strategy. With a strategy that gives up (such as
// LimitRetry), Campaign returns an error matching ErrNotObtained when it
// does; with the default it waits until ctx ends, and then returns an
// error matching both ErrNotObtained and ctx.Err(). Either way it leaves
// nothing behind: no lock and no queue entry. Other failures are those of
// Obtain: a Redis failure is returned wrapped and does not match
// ErrNotObtained; an invalid value (over 4096 bytes) matches
// ErrInvalidArgument.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	sctx, s := e.l.span(ctx, Call{Op: OpObtain, Key: e.name, Prefix: e.cfg.prefix, Hold: HoldTerm})
	t, tr, err := e.campaign(ctx, sctx, value)
	s.end(Outcome{Err: err, Attempts: tr.attempts, HandedOver: tr.handedOver})
	return t, err
}

// campaign is Campaign, whose commands use sctx, the context of its span
// (ctx without a tracer); the term's context derives from ctx, since the
// term outlives the span.
func (e *Election) campaign(ctx, sctx context.Context, value string) (*Term, tries, error) {
	if err := e.usable(); err != nil {
		return nil, tries{}, err
	}
	if err := checkValue(value); err != nil {
		return nil, tries{}, err
	}
	cfg := e.cfg
	cfg.value = value
	lk, tr, err := e.l.acquireObserved(sctx, e.name, &cfg, termKind{})
	if err != nil {
		return nil, tr, err
	}
	t := &Term{Lock: lk, e: e, value: value}
	// The renewal lasts until the term ends, whatever becomes of ctx;
	// Resign ends it, even when its release fails.
	var parent context.Context
	parent, t.stopLease = context.WithCancel(context.WithoutCancel(ctx))
	t.ctx, t.cancel = lk.leaseWithCancel(parent)
	if !tr.handedOver {
		// Tell observers at once: a lock taken while free is announced
		// by nobody else (a handoff was announced by the release). A
		// failure only delays them until they poll.
		_ = e.l.extras.news(sctx, lk.ref.channel.(string), notify.NewsMark+"leader")
	}
	return t, tr, nil
}

// A Term is one leader's hold on an election, from Campaign's return
// until Resign or the loss of leadership. It is a Lock (Deadline, Fence,
// TTL, Refresh, Lease, Token and Key work as on any lock), renewed in the
// background for as long as the term lasts; its methods are safe for
// concurrent use.
type Term struct {
	*Lock
	e      *Election
	ctx    context.Context
	cancel context.CancelCauseFunc
	// stopLease ends the renewal: a resigned term is never renewed
	// again, even when its release failed.
	stopLease context.CancelFunc

	mu    sync.Mutex // guards value
	value string
}

// Context returns the term's context, which carries its lock (see
// LockFromContext) and the values of Campaign's ctx. It is cancelled when
// leadership ends: with a cause matching ErrLockLost when the term is
// lost (a renewal found the lock taken or gone, or the Deadline passed
// without a successful renewal), or ErrResigned when it was resigned.
// Leader work must stop when it is done.
func (t *Term) Context() context.Context { return t.ctx }

// Value returns the leader's value: the one it campaigned with, or the
// last it proclaimed.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Resign ends the term: it cancels the term's context with a cause
// matching ErrResigned, then releases leadership, handing it in the same
// round trip to the candidate that has waited longest, if any, and
// deletes the proclaimed value. It returns an error matching ErrNotHeld
// when the term had already ended (lost, or resigned before); another
// error means Redis could not answer: the term is no longer renewed, and
// leadership passes when the lock's TTL runs out, unless Resign is called
// again and succeeds.
func (t *Term) Resign(ctx context.Context) error {
	t.cancel(ErrResigned)
	t.stopLease()
	return t.Lock.Release(ctx)
}

// Release is Resign, so that a Term ends the way any hold does.
func (t *Term) Release(ctx context.Context) error {
	return t.Resign(ctx)
}

// Proclaim changes the leader's value to value, only while the term
// lasts, and announces it to observers. It returns an error matching
// ErrNotHeld, and changes nothing, when the term has ended; when Proclaim
// is the first to find the lock taken or gone, it also ends the term, as
// a lost lease does. Other errors mean Redis could not answer: the value
// may or may not have changed.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if err := t.heldLocally(); err != nil {
		return err
	}
	ok, err := t.e.l.extras.proclaim(ctx, t.ref, value)
	if err != nil {
		return fmt.Errorf("locksmith: proclaim in %q: %w", t.key, err)
	}
	if !ok {
		t.lose(fmt.Errorf("%w: %q was found expired or held by another candidate when proclaiming", ErrLockLost, t.key))
		return t.notHeld()
	}
	t.mu.Lock()
	t.value = value
	t.mu.Unlock()
	return nil
}

// Run campaigns with value, runs fn while the caller leads, and campaigns
// again, until ctx ends: the loop of a process that should do leader work
// whenever it leads. fn gets the term and a context derived from the
// term's (see Term.Context), which is cancelled when leadership is lost
// or ctx ends; fn must then return promptly. Run resigns when fn returns (or panics: the panic is
// passed on after the resignation), on a context bounded as WithLock's
// release is.
//
//   - When fn returns nil, Run campaigns again after 100ms; when
//     leadership was lost, after a pause that grows from 100ms to 5s
//     while terms keep being lost or campaigns failing.
//   - When fn returns an error while leading, Run resigns and returns it.
//   - A Redis failure while campaigning is retried after the same pause;
//     an error that retrying cannot mend (ErrInvalidArgument,
//     ErrNoPermission, ErrClosed) is returned.
//   - When ctx ends, Run resigns if it leads and returns ctx.Err().
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, t *Term) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	pause := runPauseMin
	for {
		t, err := e.Campaign(ctx, value)
		switch {
		case ctx.Err() != nil:
			if t != nil {
				// Won just as ctx ended: give leadership back.
				t.resignBounded(ctx)
			}
			return ctx.Err()
		case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNoPermission), errors.Is(err, ErrClosed):
			return err
		case err != nil:
			if !sleepCtx(ctx, pause) {
				return ctx.Err()
			}
			pause = min(pause*2, runPauseMax)
			continue
		}
		lost, err := t.lead(ctx, fn)
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case lost:
			if !sleepCtx(ctx, pause) {
				return ctx.Err()
			}
			pause = min(pause*2, runPauseMax)
		default:
			// Resigned on purpose: let the others' turn begin before
			// queueing again, so that a function that returns at once
			// does not spin.
			pause = runPauseMin
			if !sleepCtx(ctx, pause) {
				return ctx.Err()
			}
		}
	}
}

// The pause of Run after a failed campaign or a lost term.
const (
	runPauseMin = 100 * time.Millisecond
	runPauseMax = 5 * time.Second
)

// lead runs fn for the term and resigns it, as Run describes. It reports
// whether the term was lost before fn returned, and fn's error if it
// failed while leading.
func (t *Term) lead(ctx context.Context, fn func(ctx context.Context, t *Term) error) (lost bool, err error) {
	defer func() {
		rerr := t.resignBounded(ctx)
		lost = t.lostCause() != nil || errors.Is(rerr, ErrNotHeld)
		if lost {
			err = nil
		}
	}()
	// fn stops when leadership ends or ctx does.
	fctx, stop := context.WithCancelCause(t.ctx)
	defer stop(nil)
	defer context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })()
	return false, fn(fctx, t)
}

// resignBounded resigns t on a context that outlives ctx's cancellation
// but is bounded as WithLock's release is.
func (t *Term) resignBounded(ctx context.Context) error {
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), releaseDeadline(t.Lock, t.lostCause() != nil, time.Now()))
	defer cancel()
	return t.Resign(rctx)
}

// sleepCtx waits for d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
