package locksmith

import "context"

// Tracing a Locker's calls: the Tracer told synchronously when each call
// starts and ends, so that a span it opens is the parent of the Redis
// commands the call sends.

// A Tracer is told, on the caller's goroutine, when a call of a Locker
// starts and when it ends: what a tracing adapter needs to wrap each call
// in a span, and to make that span the parent of the spans a go-redis
// hook (such as redisotel's) records for the call's commands. The calls
// traced are those Op lists. An Observer, by contrast, is told later, on
// a goroutine of its own, and also of what belongs to no call: renewals,
// lost leases, pub/sub connections.
//
// Start is called before the call sends anything, with the caller's ctx;
// the call then uses the context Start returns, which must be ctx or one
// derived from it (a nil one stands for ctx), for every Redis command it
// sends and every wait. End is called once the call is done, just before
// it returns, with the context Start returned and the same Call. A call
// refused for its arguments or because the Locker is closed is started
// and ended too, at once, with its error.
//
// Both are called from every goroutine that calls the Locker, often at
// once, and in the middle of a call: they must be safe for concurrent use,
// and fast, since their time is added to the call's. A panic in Start or
// End is recovered and dropped, so that a faulty tracer cannot break
// locking: after a panic in Start the call goes on with the caller's ctx,
// and End is not called for it.
//
// A Tracer never sees a token: Call holds none, and the errors Outcome
// holds are those an Event would carry.
type Tracer interface {
	Start(ctx context.Context, c Call) context.Context
	End(ctx context.Context, c Call, o Outcome)
}

// WithTracer makes the Locker tell t when each of its calls starts and
// ends (see Tracer). It is an option of New and NewQuorum only, as
// WithObserver is: given to a single call, or to Locker.Election, it
// makes that call fail with ErrInvalidArgument, since a call and the
// calls inside it (the obtain and release inside WithLock) must be traced
// alike. A nil t is refused with ErrInvalidArgument. With several
// WithTracer options, the last wins.
//
// Without WithTracer a Locker calls nothing and allocates nothing for
// tracing. With it, each traced call costs what t's Start and End cost,
// and, for a call that obtains a lock, one small allocation that the
// handle keeps so that its Release is traced too.
func WithTracer(t Tracer) Option {
	return Option{kind: optTracer, tracer: t}
}

// Op names the kind of a traced call. The zero Op is not used.
type Op uint8

const (
	// OpObtain: a call that obtains a hold, Call.Hold saying which:
	// Obtain (HoldLock), Semaphore.Acquire (HoldPermit), RWMutex's
	// ObtainRead and ObtainWrite (HoldRead, HoldWrite), Campaign
	// (HoldTerm), and the obtaining inside WithLock, WithPermit,
	// WithReadLock, WithWriteLock and Once, traced within their own call.
	OpObtain Op = iota + 1
	// OpRelease: a Release of any handle (Term.Resign included), the
	// release at the end of WithLock and its kin, and the release by
	// which Once records a completion. Call.Hold says what it releases.
	OpRelease
	// OpWithLock: a whole call of WithLock (HoldLock), WithPermit
	// (HoldPermit), WithReadLock or WithWriteLock (HoldRead, HoldWrite):
	// its obtain, the function and its release. Its OpObtain and
	// OpRelease are traced inside it, with the context its Start
	// returned; so is the function, whose context is derived from it.
	OpWithLock
	// OpOnce: a whole call of Locker.Once: its read of the completion
	// record, and, when the job is not done, an OpObtain, the function
	// and an OpRelease inside it. Call.Hold is zero.
	OpOnce
)

var opNames = [...]string{"", "obtain", "release", "with-lock", "once"}

// String returns the op's name in lower case, such as "with-lock".
func (o Op) String() string { return nameOf(opNames[:], int(o)) }

// A Call describes a traced call: what it is, and on which key. It holds
// no token.
type Call struct {
	// Op says which kind of call it is.
	Op Op
	// Key is the key as given to the call (a semaphore's or read-write
	// lock's key, an election's name), without the prefix; Prefix is the
	// call's prefix (see WithPrefix).
	Key, Prefix string
	// SetSize is the number of keys of a set of locks (an OpObtain of
	// ObtainAll or WithLocks, and an OpRelease of the set's handle), whose
	// first key, sorted, is Key; 0 for every other call. (A Call stays
	// comparable with ==; the set's keys are in the Lock, and in the
	// observer's Event.Keys.)
	SetSize int
	// Hold says what the call obtains or releases (see Op); zero for
	// OpOnce.
	Hold Hold
}

// An Outcome is how a traced call ended, as Tracer.End is told.
type Outcome struct {
	// Err is the error the call returned; nil when it succeeded. Class
	// sorts it as ClassOf does, except that an error the function of an
	// OpWithLock or OpOnce returned is ClassFunction (see ErrorClass).
	// An OpOnce that found its job done has no error; Once says so.
	Err   error
	Class ErrorClass
	// Attempts is how many attempts an OpObtain sent to Redis (0 when it
	// was refused before sending any), and HandedOver whether its hold
	// was handed over by a release rather than taken by an attempt, as
	// in an EventObtain.
	Attempts   int
	HandedOver bool
	// Once is what an OpOnce did (see OnceResult); zero for other ops
	// and when its function panicked.
	Once OnceResult
	// Panicked is set when the function of an OpWithLock or OpOnce
	// panicked: End is called while the panic unwinds, after the
	// release, and the panic goes on after it. Err is nil then.
	Panicked bool
}

// ClassOf returns the class of err, an error returned by this package,
// as events and outcomes sort it: ClassNone for nil, the class of the
// first sentinel it matches in the order ClassInvalid (ErrInvalidArgument
// or ErrWrongKind), ClassClosed,
// ClassNoPermission, ClassNotReplicated, ClassLost, ClassNotObtained,
// ClassNotHeld (a lost lock is reported as lost even when the error also
// says it is not held), and ClassRedis for anything else.
func ClassOf(err error) ErrorClass { return classOf(err) }

// tracerOf returns the tracer the last valid WithTracer in opts gives,
// or nil.
func tracerOf(opts []Option) Tracer {
	var t Tracer
	for _, opt := range opts {
		if opt.kind == optTracer && opt.tracer != nil {
			t = opt.tracer
		}
	}
	return t
}

// A span is one traced call in progress; the zero span traces nothing.
type span struct {
	t   Tracer
	ctx context.Context // what Start returned
	c   Call
}

// safeStart calls t.Start, and returns what it returns, or ctx when that
// is nil; ok is false when it panicked.
func safeStart(ctx context.Context, t Tracer, c Call) (out context.Context, ok bool) {
	defer func() {
		if recover() != nil {
			out, ok = ctx, false
		}
	}()
	if out = t.Start(ctx, c); out == nil {
		out = ctx
	}
	return out, true
}

// end ends the traced call with o, whose Class it sets unless it is set.
func (s span) end(o Outcome) {
	if s.t == nil {
		return
	}
	if o.Class == ClassNone {
		o.Class = classOf(o.Err)
	}
	defer func() {
		// A panic of End is dropped. (This recovers nothing else: a
		// panic of the traced function that unwinds through the caller
		// was not raised by a call deferred here.)
		_ = recover()
	}()
	s.t.End(s.ctx, s.c, o)
}

// span starts tracing call c of l, if l has a tracer (a nil l has none),
// and returns the context the call must use.
func (l *Locker) span(ctx context.Context, c Call) (context.Context, span) {
	if !l.tracing() {
		return ctx, span{}
	}
	sctx, ok := safeStart(ctx, l.tracer, c)
	if !ok {
		return ctx, span{}
	}
	return sctx, span{t: l.tracer, ctx: sctx, c: c}
}

// tracing reports whether l traces its calls; false for a nil Locker.
func (l *Locker) tracing() bool { return l != nil && l.tracer != nil }

// hooked reports whether l has an observer or a tracer.
func (l *Locker) hooked() bool { return l.obs != nil || l.tracer != nil }

// traced runs call, a call described by c that runs a function (an
// OpWithLock), in a span. call reports whether the function itself
// failed, so that the outcome can tell its failure from the lock's (see
// callClass).
func (l *Locker) traced(ctx context.Context, c Call, call func(ctx context.Context) (failed bool, err error)) (err error) {
	ctx, s := l.span(ctx, c)
	panicked, failed := true, false
	defer func() { s.end(Outcome{Err: err, Class: callClass(err, failed), Panicked: panicked}) }()
	failed, err = call(ctx)
	panicked = false
	return err
}

// callClass returns the class of err, returned by a call whose function
// failed if failed is set: ClassFunction when err matches none of the
// package's sentinels (a lost lock, say, is ClassLost whatever the
// function returned), otherwise as classOf.
func callClass(err error, failed bool) ErrorClass {
	c := classOf(err)
	if failed && c == ClassRedis {
		return ClassFunction
	}
	return c
}
