package locksmith_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// slogRecords decodes the JSON records written to buf.
func slogRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(buf.String()) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), "record %q", line)
		recs = append(recs, r)
	}
	return recs
}

func TestSlogObserverLevels(t *testing.T) {
	errRedis := errors.New("connection refused")
	tests := []struct {
		name  string
		event locksmith.Event
		level string // "" when nothing is logged at Debug
		msg   string
	}{
		{"obtained", locksmith.Event{Kind: locksmith.EventObtain, Key: "k", Hold: locksmith.HoldLock}, "DEBUG", "locksmith: obtained"},
		{"contention", locksmith.Event{Kind: locksmith.EventObtain, Key: "k", Err: locksmith.ErrNotObtained, Class: locksmith.ClassNotObtained}, "DEBUG", "locksmith: not obtained"},
		{"obtain failed", locksmith.Event{Kind: locksmith.EventObtain, Key: "k", Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: obtain failed"},
		{"invalid", locksmith.Event{Kind: locksmith.EventObtain, Err: locksmith.ErrInvalidArgument, Class: locksmith.ClassInvalid}, "ERROR", "locksmith: obtain refused: invalid argument"},
		{"released", locksmith.Event{Kind: locksmith.EventRelease, Key: "k"}, "DEBUG", "locksmith: released"},
		{"release not held", locksmith.Event{Kind: locksmith.EventRelease, Key: "k", Err: locksmith.ErrNotHeld, Class: locksmith.ClassNotHeld}, "WARN", "locksmith: release found the lock expired or taken"},
		{"release failed", locksmith.Event{Kind: locksmith.EventRelease, Key: "k", Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: release failed; the lock stays until its TTL"},
		{"renewed", locksmith.Event{Kind: locksmith.EventRenewal, Key: "k"}, "DEBUG", "locksmith: renewed"},
		{"renewal failed", locksmith.Event{Kind: locksmith.EventRenewal, Key: "k", Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: renewal failed"},
		{"lost", locksmith.Event{Kind: locksmith.EventLeaseLost, Key: "k", Err: locksmith.ErrLockLost, Class: locksmith.ClassLost}, "ERROR", "locksmith: lease lost"},
		{"once skipped", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceSkipped}, "INFO", "locksmith: once: skipped, already done"},
		{"once recorded", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceRecorded}, "INFO", "locksmith: once: ran and recorded"},
		{"once ran", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceRan, Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: once: ran but not recorded"},
		{"once ran and failed", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceRan, Err: errors.New("job failed"), Class: locksmith.ClassFunction}, "WARN", "locksmith: once: ran and failed; not recorded"},
		{"once held elsewhere", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceNotRun, Err: locksmith.ErrNotObtained, Class: locksmith.ClassNotObtained}, "INFO", "locksmith: once: not run, the lock is held elsewhere"},
		{"once failed", locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceNotRun, Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: once: not run"},
		{"conn up", locksmith.Event{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnUp, Attempts: 1}, "DEBUG", "locksmith: pub/sub connection up"},
		{"conn down", locksmith.Event{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnDown, Err: errRedis, Class: locksmith.ClassRedis}, "WARN", "locksmith: pub/sub connection down; waiters poll"},
		{"conn replaced", locksmith.Event{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnReplaced, Err: errRedis, Class: locksmith.ClassRedis}, "DEBUG", "locksmith: pub/sub connection replaced"},
		{"conn up again", locksmith.Event{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnUp, Attempts: 1}, "INFO", "locksmith: pub/sub connection up again"},
		{"conn closed", locksmith.Event{Kind: locksmith.EventSubscriber, Conn: locksmith.ConnClosed}, "DEBUG", "locksmith: pub/sub connection closed"},
		{"a kind it does not know", locksmith.Event{Kind: 200}, "", ""},
	}
	var buf bytes.Buffer
	o := locksmith.SlogObserver(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// The cases run in order, on one observer: "conn up again" follows
	// "conn down".
	for _, tc := range tests {
		buf.Reset()
		o.Observe(tc.event)
		recs := slogRecords(t, &buf)
		if tc.level == "" {
			require.Empty(t, recs, tc.name)
			continue
		}
		require.Len(t, recs, 1, tc.name)
		require.Equal(t, tc.level, recs[0]["level"], tc.name)
		require.Equal(t, tc.msg, recs[0]["msg"], tc.name)
		if tc.event.Err != nil {
			require.Equal(t, tc.event.Err.Error(), recs[0]["error"], tc.name)
			require.Equal(t, tc.event.Class.String(), recs[0]["class"], tc.name)
		}
	}

	// Drops are reported on their own, at Warn, beside the event.
	buf.Reset()
	o.Observe(locksmith.Event{Kind: locksmith.EventObtain, Key: "k", Dropped: 3})
	recs := slogRecords(t, &buf)
	require.Len(t, recs, 2)
	require.Equal(t, "WARN", recs[0]["level"])
	require.EqualValues(t, 3, recs[0]["dropped"])

	// Nothing below the logger's level is written.
	buf.Reset()
	quiet := locksmith.SlogObserver(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	quiet.Observe(locksmith.Event{Kind: locksmith.EventOnce, Key: "k", Once: locksmith.OnceSkipped})
	require.Zero(t, buf.Len())

	require.Panics(t, func() { locksmith.SlogObserver(nil) })
}

// A lease lost, logged through a real Locker: one Error record with the
// key, and no token anywhere in the log.
func TestSlogObserverLeaseLost(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	c := srv.Client(t)
	var buf bytes.Buffer // written by the delivering goroutine, read after Close has waited for it
	l := newLocker(t, c, locksmith.WithObserver(locksmith.SlogObserver(
		slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))))
	key := uniqueKey(t)
	var token string
	err := l.WithLock(ctx, key, func(ctx context.Context) error {
		token = locksmith.LockFromContext(ctx).Token()
		require.NoError(t, c.Del(ctx, key).Err())
		<-ctx.Done()
		return nil
	}, locksmith.WithTTL(time.Second), locksmith.WithRenewInterval(20*time.Millisecond))
	require.ErrorIs(t, err, locksmith.ErrLockLost)
	require.NoError(t, l.Close()) // delivers what is buffered
	out := buf.String()
	require.NotContains(t, out, token)
	var lost []map[string]any
	for line := range strings.Lines(out) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		if r["msg"] == "locksmith: lease lost" {
			lost = append(lost, r)
		}
	}
	require.Len(t, lost, 1, "lease-lost records in:\n%s", out)
	require.Equal(t, "ERROR", lost[0]["level"])
	require.Equal(t, key, lost[0]["key"])
	require.Equal(t, "lost", lost[0]["class"])
}
