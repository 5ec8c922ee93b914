// Package locksmithotel reports what a locksmith Locker does to
// OpenTelemetry: metrics from its events (see locksmith.Observer) and
// spans from its calls (see locksmith.Tracer), whose contexts carry the
// spans to the Redis commands of each call, so that go-redis's redisotel
// command spans become their children.
//
// Give a Locker both halves:
//
//	tel, err := locksmithotel.New(
//		locksmithotel.WithMeterProvider(mp),
//		locksmithotel.WithTracerProvider(tp),
//	)
//	if err != nil { ... }
//	locker := locksmith.New(client, tel.Options()...)
//
// The metrics and spans, their attributes and the questions they answer
// are listed in docs/observability.md of the locksmith repository. By
// default no attribute names the key, so the number of time series does
// not grow with the number of keys; WithKeyAttribute opts in.
package locksmithotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/locksmith-go/locksmith"
)

// ScopeName is the instrumentation scope of the meter and tracer that
// Telemetry uses.
const ScopeName = "github.com/locksmith-go/locksmith/otel"

// The attribute keys of the metrics and spans.
const (
	// HoldKey is what was obtained or released: "lock", "permit",
	// "read", "write" or "term" (see locksmith.Hold).
	HoldKey = attribute.Key("locksmith.hold")
	// OutcomeKey is how a call ended: "ok", or the name of the class of
	// its error, such as "not-obtained" or "redis-error" (see
	// locksmith.ErrorClass).
	OutcomeKey = attribute.Key("locksmith.outcome")
	// HandedOverKey says whether a waiting obtain was handed the lock by
	// a release rather than taking it with an attempt.
	HandedOverKey = attribute.Key("locksmith.handed_over")
	// AttemptsKey is how many attempts an obtain sent to Redis (spans
	// only).
	AttemptsKey = attribute.Key("locksmith.attempts")
	// SetSizeKey is the number of keys of a set of locks
	// (locksmith.Locker.ObtainAll, WithLocks) that an obtain or a release
	// covered; absent for a single key (spans only).
	SetSizeKey = attribute.Key("locksmith.set_size")
	// OnceResultKey is what a call of Once did: "skipped", "ran",
	// "recorded" or "not-run" (see locksmith.OnceResult).
	OnceResultKey = attribute.Key("locksmith.once.result")
	// StateKey is the new state of a pub/sub connection: "up", "down",
	// "replaced" or "closed" (see locksmith.ConnState).
	StateKey = attribute.Key("locksmith.subscriber.state")
)

// Telemetry turns what Lockers do into OpenTelemetry metrics and spans.
// Make one with New and give its Options to each Locker; one Telemetry
// can serve many Lockers, and is safe for concurrent use. It owns nothing
// that needs closing: the providers belong to the caller, who shuts them
// down.
type Telemetry struct {
	tracer trace.Tracer
	// keyAttrs returns the attributes that name a key; nil for none.
	keyAttrs func(key string) []attribute.KeyValue
	m        instruments
	sets     attributeSets
}

// An Option configures New.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	keyAttrs func(key string) []attribute.KeyValue
}

// WithMeterProvider sets where the metrics go. The default is the global
// provider (otel.GetMeterProvider) at the time New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets where the spans go. The default is the global
// provider (otel.GetTracerProvider) at the time New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithKeyAttribute adds to every metric and span that concerns a key the
// attributes f returns for it (the key as given to the call, without the
// prefix). f is called for each measurement and span, from many
// goroutines at once. Every distinct set of attributes is a time series
// of its own, so f should map the keys to few values, such as the kind of
// job a key names ("report" for "report:2026-01-02"), or return none for
// the keys that are not worth one. f must return the same attributes for
// the same key every time: the count of obtains under way is raised with
// what it returns when a call starts and lowered with what it returns
// when the call ends. Without this option no attribute names the key.
func WithKeyAttribute(f func(key string) []attribute.KeyValue) Option {
	return func(c *config) { c.keyAttrs = f }
}

// New returns a Telemetry that records to the providers the options give
// (the global ones by default). It fails only when an instrument cannot
// be created, or an option is nil.
func New(opts ...Option) (*Telemetry, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("locksmithotel: nil Option")
		}
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	t := &Telemetry{tracer: c.tp.Tracer(ScopeName), keyAttrs: c.keyAttrs}
	if err := t.m.create(c.mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("locksmithotel: %w", err)
	}
	t.sets = newAttributeSets()
	return t, nil
}

// Options returns the options that make a Locker report to t: its
// Observer and its Tracer. Call it once per Locker (as New and
// NewQuorum's arguments): each Locker needs an Observer of its own.
func (t *Telemetry) Options() []locksmith.Option {
	return []locksmith.Option{locksmith.WithObserver(t.Observer()), locksmith.WithTracer(t.Tracer())}
}

// Observer returns a new Observer that turns one Locker's events into
// metrics. It keeps the state of that Locker's pub/sub connections (for
// locksmith.subscriber.connections), so give each Locker its own.
func (t *Telemetry) Observer() locksmith.Observer {
	return &observer{t: t, up: make(map[string]bool)}
}

// Tracer returns the Tracer that wraps a Locker's calls in spans, and
// counts the obtaining calls under way (locksmith.lock.obtain.active).
// It keeps no state of its own: any number of Lockers may share it.
func (t *Telemetry) Tracer() locksmith.Tracer {
	return tracer{t}
}

// withKey returns m, with the key's attributes added when
// WithKeyAttribute asked for them.
func (t *Telemetry) withKey(m measured, key string) measured {
	if t.keyAttrs == nil {
		return m
	}
	extra := t.keyAttrs(key)
	if len(extra) == 0 {
		return m
	}
	return newMeasured(append(m.set.ToSlice(), extra...)...)
}
