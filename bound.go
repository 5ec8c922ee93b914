package locksmith

import (
	"context"
	"sync"
	"time"
)

// bounds makes the contexts that bound calls in time, one use after the
// other: a quorum's fan-out (quorumCall) and the release at the end of
// WithLock (releaseBounds). Each use does what context.WithDeadline does,
// for fewer allocations (a boundCtx and its Done channel, and a link when
// the parent can be cancelled): the timer is the bounds', made by the
// first use and reset for each next one.
//
// Each use gets a new boundCtx, never one that was handed to go-redis
// before: a hook may keep a command's context after the command, and a
// context, once done, must stay done, with the same values. Only the
// timer is reused, and it finds the use in progress through cur, under
// mu: a timer that fires late, for a use that has ended, finds no use or
// one whose deadline has not come, and does nothing.
type bounds struct {
	timer *time.Timer
	mu    sync.Mutex // guards cur
	cur   *boundCtx  // the use in progress; nil between uses
	// unlink stops the parent's cancellation from ending the use in
	// progress; nil when its parent cannot be cancelled.
	unlink func() bool
}

// start begins a use at now: a context done when parent is, at deadline,
// or at stop, whichever comes first, with parent's values. A parent that
// can never be cancelled (context.Background, context.WithoutCancel)
// costs no link.
func (b *bounds) start(parent context.Context, now, deadline time.Time) *boundCtx {
	ctx := &boundCtx{parent: parent, deadline: deadline, done: make(chan struct{})}
	b.mu.Lock()
	b.cur = ctx
	b.mu.Unlock()
	wait := deadline.Sub(now)
	if b.timer == nil {
		b.timer = time.AfterFunc(wait, b.expire)
	} else {
		b.timer.Reset(wait)
	}
	if parent.Done() != nil {
		b.unlink = context.AfterFunc(parent, func() { ctx.end(parent.Err()) })
		if err := parent.Err(); err != nil {
			ctx.end(err) // now, as WithDeadline would, not when the link runs
		}
	}
	return ctx
}

// stop ends the use that start began.
func (b *bounds) stop() {
	b.timer.Stop()
	if b.unlink != nil {
		b.unlink()
		b.unlink = nil
	}
	b.mu.Lock()
	ctx := b.cur
	b.cur = nil
	b.mu.Unlock()
	ctx.end(context.Canceled)
}

// expire ends the use in progress if its deadline has come: see bounds.
// The timer and time.Now's monotonic reading share one clock, so the
// firing for a use never comes before that use's deadline.
func (b *bounds) expire() {
	b.mu.Lock()
	ctx := b.cur
	b.mu.Unlock()
	if ctx != nil && !time.Now().Before(ctx.deadline) {
		ctx.end(context.DeadlineExceeded)
	}
}

// releaseBounds keeps the bounds of the releases at the end of WithLock
// (runHeld) for the next ones, so that a release's bound costs no timer.
var releaseBounds = sync.Pool{New: func() any { return new(bounds) }}

// boundCtx is a context done when its parent is, or at its deadline, or
// when the use it bounds ends (see bounds). It takes its values from its
// parent. Unlike a context of WithDeadline, it has no cause of its own:
// when its parent can be cancelled, context.Cause reports the parent's
// (nil until the parent is done). Neither the package nor go-redis asks
// for the cause of the contexts it gives go-redis.
type boundCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{} // closed by end

	mu  sync.Mutex // guards err
	err error      // set by the first end, before done is closed
}

func (b *boundCtx) Deadline() (time.Time, bool) { return b.deadline, true }

func (b *boundCtx) Done() <-chan struct{} { return b.done }

func (b *boundCtx) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *boundCtx) Value(key any) any { return b.parent.Value(key) }

// end makes b done with err, unless it is done already.
func (b *boundCtx) end(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
		close(b.done)
	}
}
