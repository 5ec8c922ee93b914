package locksmithotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/locksmith-go/locksmith"
)

// The span names, one for each kind of call (see locksmith.Op).
const (
	ObtainSpan   = "locksmith.obtain"
	ReleaseSpan  = "locksmith.release"
	WithLockSpan = "locksmith.with_lock"
	OnceSpan     = "locksmith.once"
)

var spanNames = [...]string{"locksmith.unknown", ObtainSpan, ReleaseSpan, WithLockSpan, OnceSpan}

// tracer wraps a Locker's calls in spans: see Telemetry.Tracer.
type tracer struct{ t *Telemetry }

// Start starts the call's span, as a child of the span in ctx, and counts
// an obtaining call as active.
func (tr tracer) Start(ctx context.Context, c locksmith.Call) context.Context {
	t := tr.t
	h := index(int(c.Hold), nHolds)
	if c.Op == locksmith.OpObtain {
		t.m.obtainActive.Add(ctx, 1, t.withKey(t.sets.hold[h], c.Key).add...)
	}
	opts := t.sets.spanStart[h]
	if t.keyAttrs != nil {
		if extra := t.keyAttrs(c.Key); len(extra) > 0 {
			opts = spanStartOptions(append(holdAttr(c.Hold), extra...))
		}
	}
	ctx, _ = t.tracer.Start(ctx, spanNames[index(int(c.Op), len(spanNames))], opts...)
	return ctx
}

// spanStartOptions returns the options of a span with attrs.
func spanStartOptions(attrs []attribute.KeyValue) []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithAttributes(attrs...)} // an internal span, the default kind
}

// End ends the call's span with its outcome. A call that failed gets an
// error status, except for one that did not obtain because the hold was
// taken, its strategy gave up or its context ended (ClassNotObtained): a
// lock held elsewhere is an expected answer, not a fault.
func (tr tracer) End(ctx context.Context, c locksmith.Call, o locksmith.Outcome) {
	t := tr.t
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 4)
		attrs = append(attrs, OutcomeKey.String(outcomeOf(o.Class)))
		if c.SetSize > 0 {
			attrs = append(attrs, SetSizeKey.Int(c.SetSize))
		}
		switch c.Op {
		case locksmith.OpObtain:
			attrs = append(attrs, AttemptsKey.Int(o.Attempts), HandedOverKey.Bool(o.HandedOver))
		case locksmith.OpOnce:
			if o.Once != 0 {
				attrs = append(attrs, OnceResultKey.String(o.Once.String()))
			}
		}
		span.SetAttributes(attrs...)
		switch {
		case o.Panicked:
			span.SetStatus(codes.Error, "the function panicked")
		case o.Err != nil && o.Class != locksmith.ClassNotObtained:
			span.RecordError(o.Err)
			span.SetStatus(codes.Error, o.Err.Error())
		}
	}
	span.End()
	if c.Op == locksmith.OpObtain {
		t.m.obtainActive.Add(ctx, -1, t.withKey(t.sets.hold[index(int(c.Hold), nHolds)], c.Key).add...)
	}
}
