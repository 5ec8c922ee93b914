package locksmithotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
	locksmithotel "github.com/locksmith-go/locksmith/otel"
)

const (
	lockOK          = "locksmith.hold=lock,locksmith.outcome=ok"
	lockNotObtained = "locksmith.hold=lock,locksmith.outcome=not-obtained"
	lockNotHeld     = "locksmith.hold=lock,locksmith.outcome=not-held"
	lockOnly        = "locksmith.hold=lock"
)

func TestObtainAndRelease(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	l := r.locker(t, srv.Client(t))
	key := uniqueKey(t)

	lk, err := l.Obtain(ctx, key)
	require.NoError(t, err)
	_, err = l.Obtain(ctx, key)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.NoError(t, lk.Release(ctx))

	r.waitMetric(t, locksmithotel.HoldDurationName, lockOK, count(1))
	ms := r.metrics(t)
	require.Equal(t, uint64(1), ms[locksmithotel.ObtainDurationName][lockOK].count, describeMetrics(ms))
	require.Equal(t, uint64(1), ms[locksmithotel.ObtainDurationName][lockNotObtained].count, describeMetrics(ms))
	require.Positive(t, ms[locksmithotel.ObtainDurationName][lockOK].sum)
	attempts := ms[locksmithotel.ObtainAttemptsName][lockOK]
	require.Equal(t, uint64(1), attempts.count)
	require.Equal(t, 1.0, attempts.sum)
	require.Equal(t, int64(0), ms[locksmithotel.ObtainActiveName][lockOnly].value, "no obtain is under way")
	require.Empty(t, ms[locksmithotel.WaitDurationName], "nothing waited")
	require.Empty(t, ms[locksmithotel.HandoffsName])
	for name, pts := range ms {
		for a := range pts {
			require.NotContains(t, a, "key", "%s: without WithKeyAttribute no attribute names the key", name)
			require.NotContains(t, a, key, "%s: without WithKeyAttribute no attribute holds the key", name)
		}
	}

	obtains := r.ended(locksmithotel.ObtainSpan)
	require.Len(t, obtains, 2)
	ok, refused := spanAttrs(obtains[0]), spanAttrs(obtains[1])
	require.Equal(t, "lock", ok[locksmithotel.HoldKey].AsString())
	require.Equal(t, "ok", ok[locksmithotel.OutcomeKey].AsString())
	require.Equal(t, int64(1), ok[locksmithotel.AttemptsKey].AsInt64())
	require.False(t, ok[locksmithotel.HandedOverKey].AsBool())
	require.Equal(t, codes.Unset, obtains[0].Status().Code)
	// A lock held elsewhere is an answer, not a fault.
	require.Equal(t, "not-obtained", refused[locksmithotel.OutcomeKey].AsString())
	require.Equal(t, codes.Unset, obtains[1].Status().Code)
	releases := r.ended(locksmithotel.ReleaseSpan)
	require.Len(t, releases, 1)
	require.Equal(t, "ok", spanAttrs(releases[0])[locksmithotel.OutcomeKey].AsString())
	for _, s := range r.spans.Ended() {
		require.Equal(t, locksmithotel.ScopeName, s.InstrumentationScope().Name)
		require.False(t, s.Parent().IsValid(), "%s has a parent, but the calls had none", s.Name())
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), lk.Token(), "a span carries the token")
		}
	}
}

// A set of locks: its obtain and release spans carry the set's size, a
// single key's do not, and its obtain is measured as one obtain.
func TestSetOfLocks(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	l := r.locker(t, srv.Client(t))
	tag := uniqueKey(t)
	keys := []string{"{" + tag + "}:a", "{" + tag + "}:b", "{" + tag + "}:c"}

	lk, err := l.ObtainAll(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	single, err := l.Obtain(ctx, keys[0])
	require.NoError(t, err)
	require.NoError(t, single.Release(ctx))

	r.waitMetric(t, locksmithotel.HoldDurationName, lockOK, count(2))
	ms := r.metrics(t)
	require.Equal(t, uint64(2), ms[locksmithotel.ObtainDurationName][lockOK].count, describeMetrics(ms))
	for _, name := range []string{locksmithotel.ObtainSpan, locksmithotel.ReleaseSpan} {
		spans := r.ended(name)
		require.Len(t, spans, 2, name)
		set, one := spanAttrs(spans[0]), spanAttrs(spans[1])
		require.Equal(t, int64(len(keys)), set[locksmithotel.SetSizeKey].AsInt64(), name)
		require.Equal(t, "ok", set[locksmithotel.OutcomeKey].AsString(), name)
		_, ok := one[locksmithotel.SetSizeKey]
		require.False(t, ok, "%s of a single key has no set size", name)
	}
}

// A waiter handed the lock: the obtain under way is counted while it
// waits, the handoff and the wait are measured, and the pub/sub
// connection the waiter listened on is counted up, then closed.
func TestHandoffAndSubscriber(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	key := uniqueKey(t)
	plain := locksmith.New(srv.Client(t))
	t.Cleanup(func() { _ = plain.Close() })
	holder, err := plain.Obtain(ctx, key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)

	l := r.locker(t, srv.Client(t))
	type result struct {
		lk  *locksmith.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		lk, err := l.Obtain(ctx, key, locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
		got <- result{lk, err}
	}()
	r.waitMetric(t, locksmithotel.ObtainActiveName, lockOnly, value(1))
	r.waitMetric(t, locksmithotel.ConnectionsName, "", value(1))
	// The waiter's queue entry, which the release hands the lock to.
	require.Eventually(t, func() bool {
		st, err := plain.Inspect(ctx, key)
		return err == nil && st.Queued == 1
	}, 5*time.Second, time.Millisecond, "the waiter did not queue")
	require.NoError(t, holder.Release(ctx))
	var res result
	select {
	case res = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	require.NoError(t, res.err)

	r.waitMetric(t, locksmithotel.HandoffsName, lockOnly, value(1))
	r.waitMetric(t, locksmithotel.WaitDurationName, "locksmith.handed_over=true,"+lockOK, count(1))
	require.Equal(t, int64(0), r.metrics(t)[locksmithotel.ObtainActiveName][lockOnly].value)
	obtains := r.ended(locksmithotel.ObtainSpan)
	require.Len(t, obtains, 1)
	require.True(t, spanAttrs(obtains[0])[locksmithotel.HandedOverKey].AsBool())

	require.NoError(t, res.lk.Release(ctx))
	// The connection closes once nobody has waited for half a second.
	r.waitMetric(t, locksmithotel.ChangesName, "locksmith.subscriber.state=closed", value(1))
	ms := r.metrics(t)
	require.Equal(t, int64(0), ms[locksmithotel.ConnectionsName][""].value, describeMetrics(ms))
	require.Equal(t, int64(1), ms[locksmithotel.ChangesName]["locksmith.subscriber.state=up"].value, describeMetrics(ms))
}

// A lease renews the lock, then finds it deleted behind its back: the
// renewals are counted by outcome, the loss is counted, and the release
// that follows measures the hold as not held.
func TestLeaseRenewedThenLost(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	c := srv.Client(t)
	l := r.locker(t, c)
	key := uniqueKey(t)
	err := l.WithLock(ctx, key, func(ctx context.Context) error {
		r.waitMetric(t, locksmithotel.RenewalsName, lockOK, func(p point) bool { return p.value >= 1 })
		require.NoError(t, c.Del(ctx, key).Err())
		<-ctx.Done()
		return nil
	}, locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(20*time.Millisecond))
	require.ErrorIs(t, err, locksmith.ErrLockLost)
	r.waitMetric(t, locksmithotel.LostName, lockOnly, value(1))
	r.waitMetric(t, locksmithotel.RenewalsName, lockNotHeld, value(1))
	r.waitMetric(t, locksmithotel.HoldDurationName, lockNotHeld, count(1))

	withLock := r.ended(locksmithotel.WithLockSpan)
	require.Len(t, withLock, 1)
	require.Equal(t, codes.Error, withLock[0].Status().Code)
	require.Equal(t, "lost", spanAttrs(withLock[0])[locksmithotel.OutcomeKey].AsString())
	release := r.ended(locksmithotel.ReleaseSpan)
	require.Len(t, release, 1)
	require.Equal(t, codes.Error, release[0].Status().Code, "a release that found the lock gone is a fault")
	require.Equal(t, withLock[0].SpanContext().SpanID(), release[0].Parent().SpanID())
}

func TestOnce(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	l := r.locker(t, srv.Client(t))
	key := uniqueKey(t)
	noop := func(context.Context) error { return nil }

	ran, err := l.Once(ctx, key, noop)
	require.NoError(t, err)
	require.True(t, ran)
	ran, err = l.Once(ctx, key, noop)
	require.NoError(t, err)
	require.False(t, ran)
	// Held elsewhere: not run.
	other := uniqueKey(t)
	lk, err := l.Obtain(ctx, other)
	require.NoError(t, err)
	_, err = l.Once(ctx, other, noop)
	require.ErrorIs(t, err, locksmith.ErrNotObtained)
	require.NoError(t, lk.Release(ctx))

	r.waitMetric(t, locksmithotel.OnceCallsName, "locksmith.once.result=not-run,locksmith.outcome=not-obtained", value(1))
	ms := r.metrics(t)
	require.Equal(t, int64(1), ms[locksmithotel.OnceCallsName]["locksmith.once.result=recorded,locksmith.outcome=ok"].value, describeMetrics(ms))
	require.Equal(t, int64(1), ms[locksmithotel.OnceCallsName]["locksmith.once.result=skipped,locksmith.outcome=ok"].value, describeMetrics(ms))

	onces := r.ended(locksmithotel.OnceSpan)
	require.Len(t, onces, 3)
	var results []string
	for _, s := range onces {
		results = append(results, spanAttrs(s)[locksmithotel.OnceResultKey].AsString())
		require.Equal(t, codes.Unset, s.Status().Code, "%s", s.Name())
	}
	require.Equal(t, []string{"recorded", "skipped", "not-run"}, results)
	// The first Once's obtain and release are its children.
	first := onces[0].SpanContext().SpanID()
	var children []string
	for _, s := range r.spans.Ended() {
		if s.Parent().SpanID() == first {
			children = append(children, s.Name())
		}
	}
	require.ElementsMatch(t, []string{locksmithotel.ObtainSpan, locksmithotel.ReleaseSpan}, children)
}

// The spans of a WithLock nest: the call, its obtain and release, the
// function's own spans, and go-redis's command spans (redisotel) under
// the locksmith span of the call that sent them.
func TestSpansParentRedisCommands(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t)
	client := srv.Client(t)
	require.NoError(t, redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(r.tp)))
	l := r.locker(t, client)
	key := uniqueKey(t)

	errJob := errors.New("job failed")
	err := l.WithLock(ctx, key, func(ctx context.Context) error {
		_, span := r.tp.Tracer("job").Start(ctx, "job")
		span.End()
		return errJob
	})
	require.ErrorIs(t, err, errJob)

	spans := r.spans.Ended()
	byID := make(map[string]sdktrace.ReadOnlySpan)
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
	}
	parentName := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID().String()]; ok {
			return p.Name()
		}
		return ""
	}
	withLock := r.ended(locksmithotel.WithLockSpan)
	require.Len(t, withLock, 1)
	require.False(t, withLock[0].Parent().IsValid())
	require.Equal(t, codes.Error, withLock[0].Status().Code)
	require.Equal(t, "function-error", spanAttrs(withLock[0])[locksmithotel.OutcomeKey].AsString(),
		"fn's own error is the function's, not Redis's")

	var redisUnder = map[string]int{}
	for _, s := range spans {
		switch s.Name() {
		case locksmithotel.ObtainSpan, locksmithotel.ReleaseSpan, "job":
			require.Equal(t, locksmithotel.WithLockSpan, parentName(s), "the parent of %s", s.Name())
		case locksmithotel.WithLockSpan:
		case "redis.dial":
			// go-redis dials new connections on a context of its own
			// (a dial may outlive the command that asked for it).
		default:
			// A command span of redisotel (or its dial): find the
			// locksmith span above it.
			p := s
			for !strings.HasPrefix(p.Name(), "locksmith.") {
				next, ok := byID[p.Parent().SpanID().String()]
				require.True(t, ok, "span %s has no locksmith span above it", s.Name())
				p = next
			}
			redisUnder[p.Name()]++
		}
	}
	require.Positive(t, redisUnder[locksmithotel.ObtainSpan], "no command span under the obtain: %v", redisUnder)
	require.Positive(t, redisUnder[locksmithotel.ReleaseSpan], "no command span under the release: %v", redisUnder)
	require.Zero(t, redisUnder[locksmithotel.WithLockSpan], "a command of WithLock outside its obtain and release")
}

func TestKeyAttribute(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	r := newRig(t, locksmithotel.WithKeyAttribute(func(key string) []attribute.KeyValue {
		job, _, _ := strings.Cut(key, ":")
		return []attribute.KeyValue{attribute.String("job", job)}
	}))
	l := r.locker(t, srv.Client(t))
	lk, err := l.Obtain(ctx, "report:"+uniqueKey(t))
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	r.waitMetric(t, locksmithotel.HoldDurationName, "job=report,"+lockOK, count(1))
	ms := r.metrics(t)
	require.Equal(t, uint64(1), ms[locksmithotel.ObtainDurationName]["job=report,"+lockOK].count, describeMetrics(ms))
	require.Equal(t, int64(0), ms[locksmithotel.ObtainActiveName]["job=report,"+lockOnly].value, describeMetrics(ms))
	obtain := r.ended(locksmithotel.ObtainSpan)
	require.Len(t, obtain, 1)
	require.Equal(t, "report", spanAttrs(obtain[0])["job"].AsString())
}

// A Redis that does not answer: the obtain's span has an error status.
func TestRedisDown(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	r := newRig(t)
	l := r.locker(t, srv.Client(t))
	srv.Stop()
	_, err := l.Obtain(ctx, uniqueKey(t))
	require.Error(t, err)
	require.NotErrorIs(t, err, locksmith.ErrNotObtained)
	r.waitMetric(t, locksmithotel.ObtainDurationName, "locksmith.hold=lock,locksmith.outcome=redis-error", count(1))
	obtain := r.ended(locksmithotel.ObtainSpan)
	require.Len(t, obtain, 1)
	require.Equal(t, codes.Error, obtain[0].Status().Code)
	require.NotEmpty(t, obtain[0].Events(), "the error is recorded")
}

// The connection count follows each node's state, however often a
// connection fails before another comes up; dropped events are counted.
// (These events are hard to cause on a real server at will: a pub/sub
// outage is in TestHandoffAndSubscriber's kind of scenario, and the
// library's own tests cause them.)
func TestSubscriberStatesAndDropped(t *testing.T) {
	r := newRig(t)
	o := r.tel.Observer()
	for _, e := range []locksmith.Event{
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnUp, Node: "a"},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnUp, Node: "b"},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnDown, Node: "a"},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnReplaced, Node: "a"},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnReplaced, Node: "a"},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnUp, Node: "a", Dropped: 3},
		{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnClosed, Node: "b"},
		{Kind: 200, Dropped: 2}, // a kind it does not know: only its drops count
	} {
		o.Observe(e)
	}
	ms := r.metrics(t)
	require.Equal(t, int64(1), ms[locksmithotel.ConnectionsName][""].value, describeMetrics(ms))
	require.Equal(t, int64(2), ms[locksmithotel.ChangesName]["locksmith.subscriber.state=replaced"].value)
	require.Equal(t, int64(3), ms[locksmithotel.ChangesName]["locksmith.subscriber.state=up"].value)
	require.Equal(t, int64(5), ms[locksmithotel.DroppedName][""].value)
}

func TestNewRefusesNilOption(t *testing.T) {
	_, err := locksmithotel.New(nil)
	require.Error(t, err)
}
