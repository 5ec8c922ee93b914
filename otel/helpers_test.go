package locksmithotel_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/leakcheck"
	"github.com/locksmith-go/locksmith/internal/redistest"
	locksmithotel "github.com/locksmith-go/locksmith/otel"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	code := m.Run()
	redistest.StopShared()
	os.Exit(leakcheck.After(code))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// A rig is a Telemetry whose metrics and spans the test can read.
type rig struct {
	tel    *locksmithotel.Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	// changed has a value when the metrics may have changed since it was
	// last read: an event was observed, or a call started or ended.
	changed chan struct{}
}

// newRig returns a Telemetry on SDK providers of its own, with opts.
func newRig(t *testing.T, opts ...locksmithotel.Option) *rig {
	t.Helper()
	r := &rig{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), changed: make(chan struct{}, 1)}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	tel, err := locksmithotel.New(append([]locksmithotel.Option{
		locksmithotel.WithMeterProvider(mp), locksmithotel.WithTracerProvider(r.tp)}, opts...)...)
	require.NoError(t, err)
	r.tel = tel
	return r
}

// locker returns a Locker that reports to r, closed when t ends: to the
// Telemetry's observer and tracer (as its Options give them), each
// wrapped to tell waitMetric when the metrics may have changed.
func (r *rig) locker(t *testing.T, client redis.UniversalClient, opts ...locksmith.Option) *locksmith.Locker {
	t.Helper()
	l := locksmith.New(client, append(opts,
		locksmith.WithObserver(notifyingObserver{r.tel.Observer(), r}),
		locksmith.WithTracer(notifyingTracer{r.tel.Tracer(), r}))...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// notify tells waitMetric that the metrics may have changed.
func (r *rig) notify() {
	select {
	case r.changed <- struct{}{}:
	default: // a change is pending already
	}
}

// notifyingObserver is an Observer that calls r.notify after each event.
type notifyingObserver struct {
	locksmith.Observer
	r *rig
}

func (o notifyingObserver) Observe(e locksmith.Event) {
	o.Observer.Observe(e)
	o.r.notify()
}

// notifyingTracer is a Tracer that calls r.notify after each Start and
// End.
type notifyingTracer struct {
	locksmith.Tracer
	r *rig
}

func (tr notifyingTracer) Start(ctx context.Context, c locksmith.Call) context.Context {
	ctx = tr.Tracer.Start(ctx, c)
	tr.r.notify()
	return ctx
}

func (tr notifyingTracer) End(ctx context.Context, c locksmith.Call, o locksmith.Outcome) {
	tr.Tracer.End(ctx, c, o)
	tr.r.notify()
}

// A point is what one data point holds: a sum's value, or a histogram's
// count and sum.
type point struct {
	value int64
	count uint64
	sum   float64
}

// metrics collects r's metrics: for each name, the points by their
// attributes, written as "k=v,k=v" in key order ("" for none).
func (r *rig) metrics(t *testing.T) map[string]map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	out := make(map[string]map[string]point)
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, locksmithotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			pts := make(map[string]point)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{value: p.Value}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{count: p.Count, sum: p.Sum}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{count: p.Count, sum: float64(p.Sum)}
				}
			default:
				t.Fatalf("metric %s has data of type %T", m.Name, m.Data)
			}
			out[m.Name] = pts
		}
	}
	return out
}

// attrs returns s as "k=v,k=v", sorted by key.
func attrs(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// describeMetrics lists ms, for failure messages.
func describeMetrics(ms map[string]map[string]point) string {
	var lines []string
	for name, pts := range ms {
		for a, p := range pts {
			lines = append(lines, fmt.Sprintf("%s{%s} value=%d count=%d sum=%g", name, a, p.value, p.count, p.sum))
		}
	}
	sort.Strings(lines)
	return "\n  " + strings.Join(lines, "\n  ")
}

// waitMetric waits until the point of metric name with attributes a
// satisfies ok, and returns it. It reads the metrics again each time the
// Locker made by r.locker observes an event or starts or ends a call.
func (r *rig) waitMetric(t *testing.T, name, a string, ok func(point) bool) point {
	t.Helper()
	const wait = 5 * time.Second
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		last := r.metrics(t)
		if p, found := last[name][a]; found && ok(p) {
			return p
		}
		select {
		case <-r.changed:
		case <-timeout.C:
			t.Fatalf("not within %v: %s{%s}; metrics: %s", wait, name, a, describeMetrics(last))
		}
	}
}

// count accepts a histogram point of n measurements.
func count(n uint64) func(point) bool { return func(p point) bool { return p.count == n } }

// value accepts a sum point of value v.
func value(v int64) func(point) bool { return func(p point) bool { return p.value == v } }

// ended returns the spans ended so far with name.
func (r *rig) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// spanAttrs returns the attributes of s as a map.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// uniqueKey returns a key no other test uses, even on a shared server.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("otel:%s:%d", t.Name(), time.Now().UnixNano())
}
