package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// spanKey is the context key under which spanRecorder puts the id of the
// span a context belongs to.
type spanKey struct{}

// spanOf returns the id of the innermost span of ctx, or 0.
func spanOf(ctx context.Context) int {
	id, _ := ctx.Value(spanKey{}).(int)
	return id
}

// A recordedSpan is one call a spanRecorder was told of.
type recordedSpan struct {
	id, parent int // parent: the span of the ctx given to Start; 0 if none
	call       locksmith.Call
	out        locksmith.Outcome
	ends       int  // how many times End was called for it
	sameCall   bool // End was given the Call Start was given
}

// spanRecorder is a Tracer that keeps every call it is told of, and
// marks the context Start returns with the call's id.
type spanRecorder struct {
	mu    sync.Mutex
	spans []*recordedSpan
	// stray counts the calls of End with a context Start did not return.
	stray int
}

func (r *spanRecorder) Start(ctx context.Context, c locksmith.Call) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &recordedSpan{id: len(r.spans) + 1, parent: spanOf(ctx), call: c}
	r.spans = append(r.spans, s)
	return context.WithValue(ctx, spanKey{}, s.id)
}

func (r *spanRecorder) End(ctx context.Context, c locksmith.Call, o locksmith.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := spanOf(ctx)
	if id < 1 || id > len(r.spans) || r.spans[id-1].ends > 0 && r.spans[id-1].call != c {
		r.stray++
		return
	}
	s := r.spans[id-1]
	s.ends++
	s.sameCall = s.call == c
	s.out = o
}

// all returns copies of the spans so far, checking that each was ended
// once, with its own Call and context.
func (r *spanRecorder) all(t *testing.T) []recordedSpan {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Zero(t, r.stray, "End was called with a context Start did not return")
	out := make([]recordedSpan, len(r.spans))
	for i, s := range r.spans {
		require.Equal(t, 1, s.ends, "span %d (%v) was ended %d times", s.id, s.call, s.ends)
		require.True(t, s.sameCall, "span %d was ended with another Call", s.id)
		out[i] = *s
	}
	return out
}

// reset forgets the spans so far.
func (r *spanRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans, r.stray = nil, 0
}

// describeSpans lists spans, for failure messages.
func describeSpans(spans []recordedSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %d<-%d %s %s %s err=%v attempts=%d", s.id, s.parent, s.call.Op, s.call.Hold, s.call.Key, s.out.Err, s.out.Attempts)
	}
	return b.String()
}

// spanWant is what a test expects of one span: its op and hold, and the
// index (from 1) of its parent among the spans, 0 for none.
type spanWant struct {
	op     locksmith.Op
	hold   locksmith.Hold
	parent int
	class  locksmith.ErrorClass
}

// requireSpans checks that spans are exactly want, in order, all for key.
func requireSpans(t *testing.T, spans []recordedSpan, key string, want ...spanWant) {
	t.Helper()
	require.Len(t, spans, len(want), "spans: %s", describeSpans(spans))
	for i, w := range want {
		s := spans[i]
		require.Equal(t, w.op, s.call.Op, "span %d op: %s", i+1, describeSpans(spans))
		require.Equal(t, w.hold, s.call.Hold, "span %d hold: %s", i+1, describeSpans(spans))
		require.Equal(t, key, s.call.Key, "span %d key", i+1)
		require.Equal(t, w.class, s.out.Class, "span %d class (err %v)", i+1, s.out.Err)
		require.Equal(t, w.class, locksmith.ClassOf(s.out.Err), "span %d: Class is ClassOf(Err)", i+1)
		parent := 0
		if w.parent > 0 {
			parent = spans[w.parent-1].id
		}
		require.Equal(t, parent, s.parent, "span %d parent: %s", i+1, describeSpans(spans))
	}
}

// spanHook is a go-redis hook that records, for each command, the span
// its context belongs to.
type spanHook struct {
	mu   sync.Mutex
	cmds []spanCmd
}

type spanCmd struct {
	name string
	span int
}

func (h *spanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *spanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (h *spanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.record(ctx, cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *spanHook) record(ctx context.Context, cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	switch name {
	case "hello", "client":
		return // a new connection's handshake
	case "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "ping":
		return // the subscriber's, which belong to no call
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds = append(h.cmds, spanCmd{name: name, span: spanOf(ctx)})
}

// take returns the commands recorded so far, and forgets them.
func (h *spanHook) take() []spanCmd {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmds := h.cmds
	h.cmds = nil
	return cmds
}

// spanRuns returns the spans cmds were sent in, in order, each run of
// commands of one span once.
func spanRuns(cmds []spanCmd) []int {
	var runs []int
	for _, c := range cmds {
		if len(runs) == 0 || runs[len(runs)-1] != c.span {
			runs = append(runs, c.span)
		}
	}
	return runs
}

// requireCommandsIn checks that cmds are not empty and were all sent
// within span id.
func requireCommandsIn(t *testing.T, cmds []spanCmd, id int, what string) {
	t.Helper()
	require.NotEmpty(t, cmds, "%s sent no command", what)
	for _, c := range cmds {
		require.Equal(t, id, c.span, "%s: %q was sent outside its span; commands: %v", what, c.name, cmds)
	}
}

// traced returns a Locker that traces to a new spanRecorder, on a client
// with a spanHook.
func traced(t *testing.T, b backend, opts ...locksmith.Option) (*locksmith.Locker, *spanRecorder, *spanHook) {
	t.Helper()
	rec, hook := &spanRecorder{}, &spanHook{}
	l := newLocker(t, b.client(t, hook), append(opts, locksmith.WithTracer(rec))...)
	return l, rec, hook
}

// sharedBackend is the shared real server as a backend, for the tests
// that need more than miniredis offers.
func sharedBackend(t *testing.T) backend {
	t.Helper()
	srv := redistest.Shared(t)
	return backend{name: "redis", client: func(t *testing.T, hooks ...redis.Hook) *redis.Client {
		return newClient(t, srv.Options(), hooks)
	}}
}

func TestTracerObtainAndRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		l, rec, hook := traced(t, b, locksmith.WithPrefix("trace:"))
		key := uniqueKey(t)

		lk, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		spans := rec.all(t)
		requireSpans(t, spans, key, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock})
		require.Equal(t, "trace:", spans[0].call.Prefix)
		require.Equal(t, 1, spans[0].out.Attempts)
		require.False(t, spans[0].out.HandedOver)
		requireCommandsIn(t, hook.take(), spans[0].id, "Obtain")

		rec.reset()
		require.NoError(t, lk.Release(ctx))
		spans = rec.all(t)
		requireSpans(t, spans, key, spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock})
		requireCommandsIn(t, hook.take(), spans[0].id, "Release")

		// A second Release is traced too, with its error, and sends
		// nothing.
		rec.reset()
		require.ErrorIs(t, lk.Release(ctx), locksmith.ErrNotHeld)
		requireSpans(t, rec.all(t), key, spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock, class: locksmith.ClassNotHeld})
		require.Empty(t, hook.take())

		// Held elsewhere: one attempt, not obtained.
		holder, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		rec.reset()
		hook.take()
		_, err = l.Obtain(ctx, key)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		spans = rec.all(t)
		requireSpans(t, spans, key, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, class: locksmith.ClassNotObtained})
		require.Equal(t, 1, spans[0].out.Attempts)
		requireCommandsIn(t, hook.take(), spans[0].id, "a refused Obtain")
		require.NoError(t, holder.Release(ctx))

		for _, s := range rec.all(t) {
			require.NotContains(t, fmt.Sprintf("%+v", s), holder.Token(), "a Call or Outcome carries the token")
		}
	})
}

func TestTracerRefusedCalls(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	rec := &spanRecorder{}
	l := locksmith.New(srv.Client(t), locksmith.WithTracer(rec))
	noop := func(context.Context) error { return nil }

	_, err := l.Obtain(ctx, "")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	spans := rec.all(t)
	requireSpans(t, spans, "", spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, class: locksmith.ClassInvalid})
	require.Zero(t, spans[0].out.Attempts)

	// A refused WithLock: its span, and the refused obtain within it.
	rec.reset()
	key := uniqueKey(t)
	require.ErrorIs(t, l.WithLock(ctx, key, nil), locksmith.ErrInvalidArgument)
	requireSpans(t, rec.all(t), key,
		spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldLock, class: locksmith.ClassInvalid},
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, parent: 1, class: locksmith.ClassInvalid})

	rec.reset()
	_, err = l.Semaphore(key, 0).Acquire(ctx)
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	requireSpans(t, rec.all(t), key, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldPermit, class: locksmith.ClassInvalid})

	rec.reset()
	_, err = l.Election(key).Campaign(ctx, strings.Repeat("x", 5000))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	requireSpans(t, rec.all(t), key, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldTerm, class: locksmith.ClassInvalid})

	// WithTracer belongs to New: per call, or to an election, it is
	// refused.
	rec.reset()
	_, err = l.Obtain(ctx, key, locksmith.WithTracer(&spanRecorder{}))
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	require.ErrorContains(t, err, "WithTracer")
	_, err = l.Election(key, locksmith.WithTracer(&spanRecorder{})).Campaign(ctx, "a")
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	_, err = locksmith.New(srv.Client(t), locksmith.WithTracer(nil)).Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrInvalidArgument)

	rec.reset()
	require.NoError(t, l.Close())
	_, err = l.Once(ctx, key, noop)
	require.ErrorIs(t, err, locksmith.ErrClosed)
	spans = rec.all(t)
	requireSpans(t, spans, key, spanWant{op: locksmith.OpOnce, class: locksmith.ClassClosed})
	require.Equal(t, locksmith.OnceNotRun, spans[0].out.Once)
}

func TestTracerWithLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		l, rec, hook := traced(t, b)
		key := uniqueKey(t)

		var fnSpan int
		require.NoError(t, l.WithLock(ctx, key, func(ctx context.Context) error {
			fnSpan = spanOf(ctx)
			return nil
		}))
		spans := rec.all(t)
		requireSpans(t, spans, key,
			spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldLock},
			spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, parent: 1},
			spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock, parent: 1})
		require.Equal(t, spans[0].id, fnSpan, "fn's context is not within the WithLock span")
		require.False(t, spans[0].out.Panicked)
		// The obtain's commands (a first call's permission check, the
		// acquire), then the release's.
		cmds := hook.take()
		require.Equal(t, []int{spans[1].id, spans[2].id}, spanRuns(cmds), "commands: %v", cmds)

		// fn's error is the call's.
		rec.reset()
		errJob := errors.New("job failed")
		require.ErrorIs(t, l.WithLock(ctx, key, func(context.Context) error { return errJob }), errJob)
		spans = rec.all(t)
		require.Len(t, spans, 3, describeSpans(spans))
		require.ErrorIs(t, spans[0].out.Err, errJob)
		require.Equal(t, locksmith.ClassFunction, spans[0].out.Class, "fn's own error is the function's, not Redis's")
		require.Equal(t, locksmith.ClassNone, spans[2].out.Class, "the release after it succeeded")

		// A lock lost while fn ran says more than fn's error.
		keys, err := l.Keys(key)
		require.NoError(t, err)
		admin := b.client(t)
		rec.reset()
		err = l.WithLock(ctx, key, func(ctx context.Context) error {
			require.NoError(t, admin.Del(ctx, keys.Lock).Err())
			return errJob
		})
		require.ErrorIs(t, err, errJob)
		// Noticed by the lease or by the release that found the lock
		// gone, the loss is ErrLockLost either way.
		require.ErrorIs(t, err, locksmith.ErrLockLost)
		spans = rec.all(t)
		require.Len(t, spans, 3, describeSpans(spans))
		require.Equal(t, locksmith.ClassLost, spans[0].out.Class)

		// A panic goes on, after the release and the end of the span.
		rec.reset()
		require.PanicsWithValue(t, "boom", func() {
			_ = l.WithLock(ctx, key, func(context.Context) error { panic("boom") })
		})
		spans = rec.all(t)
		requireSpans(t, spans, key,
			spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldLock},
			spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, parent: 1},
			spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock, parent: 1})
		require.True(t, spans[0].out.Panicked)
	})
}

func TestTracerOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		l, rec, hook := traced(t, b)
		key := uniqueKey(t)
		noop := func(context.Context) error { return nil }

		ran, err := l.Once(ctx, key, noop)
		require.NoError(t, err)
		require.True(t, ran)
		spans := rec.all(t)
		requireSpans(t, spans, key,
			spanWant{op: locksmith.OpOnce},
			spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, parent: 1},
			spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock, parent: 1})
		require.Equal(t, locksmith.OnceRecorded, spans[0].out.Once)
		// Once reads the record, obtains, reads it again (fn's context is
		// within Once's span), and records the completion as it releases.
		cmds := hook.take()
		require.Equal(t, []int{spans[0].id, spans[1].id, spans[0].id, spans[2].id}, spanRuns(cmds), "commands: %v", cmds)

		rec.reset()
		ran, err = l.Once(ctx, key, noop)
		require.NoError(t, err)
		require.False(t, ran)
		spans = rec.all(t)
		requireSpans(t, spans, key, spanWant{op: locksmith.OpOnce})
		require.Equal(t, locksmith.OnceSkipped, spans[0].out.Once)
		requireCommandsIn(t, hook.take(), spans[0].id, "a skipped Once")

		// A job that fails: the function's error.
		rec.reset()
		errJob := errors.New("job failed")
		ran, err = l.Once(ctx, uniqueKey(t), func(context.Context) error { return errJob })
		require.ErrorIs(t, err, errJob)
		require.True(t, ran)
		spans = rec.all(t)
		require.Len(t, spans, 3, describeSpans(spans))
		require.Equal(t, locksmith.OnceRan, spans[0].out.Once)
		require.Equal(t, locksmith.ClassFunction, spans[0].out.Class)
	})
}

// Semaphores, read-write locks and elections are traced as locks are,
// with their kind of hold.
func TestTracerHolds(t *testing.T) {
	ctx := t.Context()
	l, rec, hook := traced(t, sharedBackend(t))
	key := uniqueKey(t)
	noop := func(context.Context) error { return nil }

	p, err := l.Semaphore(key, 2).Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Release(ctx))
	spans := rec.all(t)
	requireSpans(t, spans, key,
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldPermit},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldPermit})
	cmds := hook.take()
	require.Equal(t, []int{spans[0].id, spans[1].id}, spanRuns(cmds), "commands: %v", cmds)

	rec.reset()
	require.NoError(t, l.Semaphore(key, 2).WithPermit(ctx, noop))
	requireSpans(t, rec.all(t), key,
		spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldPermit},
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldPermit, parent: 1},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldPermit, parent: 1})

	rw := l.RWMutex(uniqueKey(t))
	rec.reset()
	r, err := rw.ObtainRead(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx))
	require.NoError(t, rw.WithWriteLock(ctx, noop))
	requireSpans(t, rec.all(t), rw.Key(),
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldRead},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldRead},
		spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldWrite},
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldWrite, parent: 3},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldWrite, parent: 3})

	name := uniqueKey(t)
	rec.reset()
	hook.take()
	term, err := l.Election(name).Campaign(ctx, "me")
	require.NoError(t, err)
	spans = rec.all(t)
	requireSpans(t, spans, name, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldTerm})
	// Its announcement too is sent within the span.
	requireCommandsIn(t, hook.take(), spans[0].id, "Campaign")
	require.Zero(t, spanOf(term.Context()), "the term's context is within Campaign's span, which has ended")
	require.NoError(t, term.Resign(ctx))
	requireSpans(t, rec.all(t), name,
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldTerm},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldTerm})
}

// A waiter handed the lock by a release: its span ends with HandedOver,
// and every command it sent while waiting is within it.
func TestTracerHandoff(t *testing.T) {
	ctx := t.Context()
	b := sharedBackend(t)
	key := uniqueKey(t)
	holder, err := newLocker(t, b.client(t)).Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	rec, hook := &spanRecorder{}, &spanHook{}
	l, obs := observed(t, b.client(t, hook), locksmith.WithTracer(rec))
	got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
	// (Once its pub/sub connection is up, a waiter tries once more, in
	// case it missed a release: wait until it has heard the server.)
	obs.waitFor(t, "subscriber up", func(e locksmith.Event) bool {
		return e.Kind == locksmith.EventSubscriber && e.Conn == locksmith.ConnUp
	})
	eventually(t, 5*time.Second, func() bool { return locksmith.QueuedWaiters(l, plainNames(key).Channel) == 1 }, "the waiter queued")
	require.NoError(t, holder.Release(ctx))
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	spans := rec.all(t)
	requireSpans(t, spans, key, spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock})
	require.True(t, spans[0].out.HandedOver)
	// The attempt that queued it, and maybe the one on its subscription's
	// confirmation: none after the release.
	require.LessOrEqual(t, spans[0].out.Attempts, 2)
	requireCommandsIn(t, hook.take(), spans[0].id, "a waiting Obtain")
	require.NoError(t, res.lk.Release(ctx))
}

// panicky is a Tracer that panics in Start, in End, or in both.
type panicky struct{ start, end bool }

func (p panicky) Start(ctx context.Context, _ locksmith.Call) context.Context {
	if p.start {
		panic("tracer Start")
	}
	return context.WithValue(ctx, spanKey{}, 1)
}

func (p panicky) End(context.Context, locksmith.Call, locksmith.Outcome) {
	if p.end {
		panic("tracer End")
	}
}

// A Tracer that panics breaks nothing: every call works as without it,
// and a panic of the caller's function is still the one passed on.
func TestTracerPanics(t *testing.T) {
	for _, p := range []panicky{{start: true}, {end: true}, {start: true, end: true}} {
		t.Run(fmt.Sprintf("start=%t,end=%t", p.start, p.end), func(t *testing.T) {
			ctx := t.Context()
			hook := &spanHook{}
			l := newLocker(t, sharedBackend(t).client(t, hook), locksmith.WithTracer(p))
			key := uniqueKey(t)
			lk, err := l.Obtain(ctx, key)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
			require.NoError(t, l.WithLock(ctx, key, func(ctx context.Context) error { return nil }))
			ran, err := l.Once(ctx, key, func(ctx context.Context) error { return nil })
			require.NoError(t, err)
			require.True(t, ran)
			require.PanicsWithValue(t, "job", func() {
				_ = l.WithLock(ctx, key, func(context.Context) error { panic("job") })
			})
			// The lock was released on the way: it is free.
			lk, err = l.Obtain(ctx, key)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
			want := 1 // the context Start returned
			if p.start {
				want = 0 // the caller's, since Start panicked
			}
			for _, c := range hook.take() {
				require.Equal(t, want, c.span, "%q", c.name)
			}
		})
	}
}

// An observer and a tracer together: each is told of every call.
func TestTracerWithObserver(t *testing.T) {
	ctx := t.Context()
	rec := &spanRecorder{}
	l, obs := observed(t, redistest.Shared(t).Client(t), locksmith.WithTracer(rec))
	key := uniqueKey(t)
	require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { return nil }))
	requireSpans(t, rec.all(t), key,
		spanWant{op: locksmith.OpWithLock, hold: locksmith.HoldLock},
		spanWant{op: locksmith.OpObtain, hold: locksmith.HoldLock, parent: 1},
		spanWant{op: locksmith.OpRelease, hold: locksmith.HoldLock, parent: 1})
	obs.waitFor(t, "obtained", kindKey(locksmith.EventObtain, key))
	obs.waitFor(t, "released", kindKey(locksmith.EventRelease, key))
}

func TestOpString(t *testing.T) {
	for op, want := range map[locksmith.Op]string{
		locksmith.OpObtain: "obtain", locksmith.OpRelease: "release", locksmith.OpWithLock: "with-lock",
		locksmith.OpOnce: "once", 0: "", 99: "unknown",
	} {
		require.Equal(t, want, op.String())
	}
}
