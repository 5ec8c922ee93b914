package locksmithotel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/locksmith-go/locksmith"
)

// The metrics: their names, units and descriptions, and the observer that
// records them from a Locker's events.

// The names of the metrics.
const (
	ObtainDurationName = "locksmith.lock.obtain.duration"
	WaitDurationName   = "locksmith.lock.wait.duration"
	ObtainAttemptsName = "locksmith.lock.obtain.attempts"
	ObtainActiveName   = "locksmith.lock.obtain.active"
	HandoffsName       = "locksmith.lock.handoffs"
	HoldDurationName   = "locksmith.lock.hold.duration"
	RenewalsName       = "locksmith.lock.renewals"
	LostName           = "locksmith.lock.lost"
	OnceCallsName      = "locksmith.once.calls"
	ConnectionsName    = "locksmith.subscriber.connections"
	ChangesName        = "locksmith.subscriber.changes"
	DroppedName        = "locksmith.observer.dropped"
)

// durationBuckets are the bucket boundaries, in seconds, of the duration
// histograms: from a round trip on a local network to an hour of holding.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// attemptBuckets are the bucket boundaries of the attempts histogram.
var attemptBuckets = []float64{1, 2, 3, 5, 10, 20, 50, 100}

// instruments are the metrics of a Telemetry.
type instruments struct {
	obtainDuration, waitDuration, holdDuration metric.Float64Histogram
	obtainAttempts                             metric.Int64Histogram
	obtainActive, connections                  metric.Int64UpDownCounter
	handoffs, renewals, lost, onceCalls        metric.Int64Counter
	changes, dropped                           metric.Int64Counter
}

func (m *instruments) create(meter metric.Meter) error {
	var err, e error
	seconds := func(name, desc string) metric.Float64Histogram {
		h, e := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		err = errors.Join(err, e)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return c
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		c, e := meter.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return c
	}
	m.obtainDuration = seconds(ObtainDurationName, "How long obtaining calls took, waiting included, by outcome.")
	m.waitDuration = seconds(WaitDurationName, "How long the obtaining calls that waited (more than one attempt, or handed over) took.")
	m.holdDuration = seconds(HoldDurationName, "How long holds were held, from obtain to release, by the release's outcome.")
	m.obtainAttempts, e = meter.Int64Histogram(ObtainAttemptsName, metric.WithUnit("{attempt}"),
		metric.WithDescription("How many attempts obtaining calls sent to Redis."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	m.obtainActive = upDown(ObtainActiveName, "{call}", "Obtaining calls under way: the callers waiting for a hold.")
	m.connections = upDown(ConnectionsName, "{connection}", "Pub/sub connections up, on which waiters hear of releases.")
	m.handoffs = counter(HandoffsName, "{handoff}", "Obtaining calls handed the hold by a release.")
	m.renewals = counter(RenewalsName, "{renewal}", "Lease renewals, by outcome.")
	m.lost = counter(LostName, "{lease}", "Leases lost: the holder's work was told to stop.")
	m.onceCalls = counter(OnceCallsName, "{call}", "Calls of Once, by what they did.")
	m.changes = counter(ChangesName, "{change}", "Changes of state of pub/sub connections.")
	m.dropped = counter(DroppedName, "{event}", "Events dropped because the observer fell behind.")
	return err
}

// The numbers of values of the library's enumerations, zero included.
const (
	nHolds   = int(locksmith.HoldTerm) + 1
	nClasses = int(locksmith.ClassFunction) + 1
	nOnces   = int(locksmith.OnceNotRun) + 1
	nStates  = int(locksmith.ConnClosed) + 1
)

// A measured is a set of attributes, and the options of a measurement
// that carry it, made once: passed on as they are, they cost no
// allocation per measurement.
type measured struct {
	set attribute.Set
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasured(kv ...attribute.KeyValue) measured {
	set := attribute.NewSet(kv...)
	opt := metric.WithAttributeSet(set)
	return measured{set: set, add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
}

// attributeSets are the attribute sets the metrics use, made once so that
// recording allocates none.
type attributeSets struct {
	hold         [nHolds]measured
	holdOutcome  [nHolds][nClasses]measured
	holdOutcomeH [nHolds][nClasses][2]measured // and handed_over
	once         [nOnces][nClasses]measured
	state        [nStates]measured
	none         measured
	spanStart    [nHolds][]trace.SpanStartOption // the options of a span without key attributes
}

func newAttributeSets() attributeSets {
	var s attributeSets
	for h := range nHolds {
		hold := holdAttr(locksmith.Hold(h))
		s.hold[h] = newMeasured(hold...)
		s.spanStart[h] = spanStartOptions(hold)
		for c := range nClasses {
			outcome := OutcomeKey.String(outcomeOf(locksmith.ErrorClass(c)))
			s.holdOutcome[h][c] = newMeasured(append(hold, outcome)...)
			for i, handed := range []bool{false, true} {
				s.holdOutcomeH[h][c][i] = newMeasured(append(hold, outcome, HandedOverKey.Bool(handed))...)
			}
		}
	}
	for r := range nOnces {
		for c := range nClasses {
			s.once[r][c] = newMeasured(OnceResultKey.String(locksmith.OnceResult(r).String()),
				OutcomeKey.String(outcomeOf(locksmith.ErrorClass(c))))
		}
	}
	for st := range nStates {
		s.state[st] = newMeasured(StateKey.String(locksmith.ConnState(st).String()))
	}
	s.none = newMeasured()
	return s
}

// holdAttr returns the attribute of h, none for the zero Hold.
func holdAttr(h locksmith.Hold) []attribute.KeyValue {
	if h == 0 {
		return nil
	}
	return []attribute.KeyValue{HoldKey.String(h.String())}
}

// outcomeOf names an outcome: "ok" for no error, else the class's name.
func outcomeOf(c locksmith.ErrorClass) string {
	if c == locksmith.ClassNone {
		return "ok"
	}
	return c.String()
}

// index returns i if it is an index of an array of n, and 0 (the zero
// value's entry) otherwise: a value the library adds later is counted as
// none rather than dropped.
func index(i, n int) int {
	if i < n {
		return i
	}
	return 0
}

// observer records one Locker's events as metrics.
type observer struct {
	t *Telemetry

	mu sync.Mutex      // guards up, in case one observer is given to several Lockers
	up map[string]bool // the nodes whose connection is counted as up
}

func (o *observer) Observe(e locksmith.Event) {
	t := o.t
	ctx := context.Background()
	s := &t.sets
	h, c := index(int(e.Hold), nHolds), index(int(e.Class), nClasses)
	if e.Dropped > 0 {
		t.m.dropped.Add(ctx, int64(e.Dropped), s.none.add...)
	}
	switch e.Kind {
	case locksmith.EventObtain:
		ho := t.withKey(s.holdOutcome[h][c], e.Key)
		t.m.obtainDuration.Record(ctx, e.Waited.Seconds(), ho.rec...)
		if e.Attempts > 0 {
			t.m.obtainAttempts.Record(ctx, int64(e.Attempts), ho.rec...)
		}
		if e.Attempts > 1 || e.HandedOver {
			handed := 0
			if e.HandedOver {
				handed = 1
			}
			t.m.waitDuration.Record(ctx, e.Waited.Seconds(), t.withKey(s.holdOutcomeH[h][c][handed], e.Key).rec...)
		}
		if e.HandedOver {
			t.m.handoffs.Add(ctx, 1, t.withKey(s.hold[h], e.Key).add...)
		}
	case locksmith.EventRelease:
		t.m.holdDuration.Record(ctx, e.Held.Seconds(), t.withKey(s.holdOutcome[h][c], e.Key).rec...)
	case locksmith.EventRenewal:
		t.m.renewals.Add(ctx, 1, t.withKey(s.holdOutcome[h][c], e.Key).add...)
	case locksmith.EventLeaseLost:
		t.m.lost.Add(ctx, 1, t.withKey(s.hold[h], e.Key).add...)
	case locksmith.EventOnce:
		t.m.onceCalls.Add(ctx, 1, t.withKey(s.once[index(int(e.Once), nOnces)][c], e.Key).add...)
	case locksmith.EventSubscriber:
		t.m.changes.Add(ctx, 1, s.state[index(int(e.Conn), nStates)].add...)
		if d := o.connDelta(e.Node, e.Conn); d != 0 {
			t.m.connections.Add(ctx, d, s.none.add...)
		}
	}
}

// connDelta returns how the count of connections up changes when node's
// connection enters state: one more when it comes up, one less when a
// connection that was up goes down, is replaced or closed.
func (o *observer) connDelta(node string, state locksmith.ConnState) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	was := o.up[node]
	now := state == locksmith.ConnUp
	switch {
	case now && !was:
		o.up[node] = true
		return 1
	case !now && was:
		delete(o.up, node)
		return -1
	}
	return 0
}
