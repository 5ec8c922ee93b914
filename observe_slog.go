package locksmith

import (
	"context"
	"log/slog"
	"sync"
)

// SlogObserver returns an Observer that writes what operators need to
// know of a Locker's events to logger, one record per event, at these
// levels:
//
//   - Error: a lease lost (EventLeaseLost): the holder's work may have
//     overlapped the next holder's, and its context was cancelled. An
//     obtain refused as invalid (ClassInvalid): a mistake in code or
//     configuration, which every call repeats.
//   - Warn: a failed release (the lock stays until its TTL, and others
//     wait for it; or it had expired or was taken while held), a failed
//     renewal (retried until the Deadline), an obtain that failed for
//     any other reason than contention or Close (Redis failed, a
//     permission is missing, replicas did not acknowledge), a Once whose
//     job failed or could not run for such a reason, a pub/sub connection
//     down (waiters fall back to polling, so handoffs are slower), and
//     events dropped because the observer fell behind.
//   - Info: a Once skipped because its job was done already, or done and
//     recorded now, or not run because another process held its lock
//     (the answer to "why did this job not run last night?"), and a
//     pub/sub connection up again after it was down.
//   - Debug: the routine: every lock obtained, released and renewed, an
//     obtain that found the lock held (contention is normal; the caller
//     has the error) or the Locker closed, a connection up for the first
//     time, replaced or closed.
//
// Records carry the key, prefix, kind of hold, and the durations, counts
// and error that apply, never a token. Nothing is formatted for a level
// the logger does not enable. SlogObserver panics if logger is nil.
func SlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		panic("locksmith: SlogObserver with a nil logger")
	}
	return &slogObserver{log: logger, down: make(map[string]bool)}
}

type slogObserver struct {
	log *slog.Logger

	mu   sync.Mutex      // guards down
	down map[string]bool // the nodes whose connection was reported down
}

func (s *slogObserver) Observe(e Event) {
	ctx := context.Background()
	if e.Dropped > 0 && s.log.Enabled(ctx, slog.LevelWarn) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "locksmith: observer fell behind; events dropped",
			slog.Uint64("dropped", e.Dropped))
	}
	level, msg := s.classify(e)
	if msg == "" || !s.log.Enabled(ctx, level) {
		return
	}
	s.log.LogAttrs(ctx, level, msg, attrsOf(e)...)
}

// classify returns the level and message of e's record; no message for
// kinds it does not know.
func (s *slogObserver) classify(e Event) (slog.Level, string) {
	switch e.Kind {
	case EventObtain:
		switch e.Class {
		case ClassNone:
			return slog.LevelDebug, "locksmith: obtained"
		case ClassNotObtained, ClassClosed:
			return slog.LevelDebug, "locksmith: not obtained"
		case ClassInvalid:
			return slog.LevelError, "locksmith: obtain refused: invalid argument"
		}
		return slog.LevelWarn, "locksmith: obtain failed"
	case EventRelease:
		switch e.Class {
		case ClassNone:
			return slog.LevelDebug, "locksmith: released"
		case ClassNotHeld:
			return slog.LevelWarn, "locksmith: release found the lock expired or taken"
		}
		return slog.LevelWarn, "locksmith: release failed; the lock stays until its TTL"
	case EventRenewal:
		if e.Err == nil {
			return slog.LevelDebug, "locksmith: renewed"
		}
		return slog.LevelWarn, "locksmith: renewal failed"
	case EventLeaseLost:
		return slog.LevelError, "locksmith: lease lost"
	case EventOnce:
		switch {
		case e.Once == OnceSkipped:
			return slog.LevelInfo, "locksmith: once: skipped, already done"
		case e.Once == OnceRecorded:
			return slog.LevelInfo, "locksmith: once: ran and recorded"
		case e.Once == OnceNotRun && e.Class == ClassNotObtained:
			return slog.LevelInfo, "locksmith: once: not run, the lock is held elsewhere"
		case e.Once == OnceNotRun && e.Class == ClassClosed:
			return slog.LevelDebug, "locksmith: once: not run, the Locker is closed"
		case e.Class == ClassInvalid:
			return slog.LevelError, "locksmith: once: refused: invalid argument"
		case e.Once == OnceNotRun:
			return slog.LevelWarn, "locksmith: once: not run"
		case e.Class == ClassFunction:
			return slog.LevelWarn, "locksmith: once: ran and failed; not recorded"
		}
		return slog.LevelWarn, "locksmith: once: ran but not recorded"
	case EventSubscriber:
		return s.conn(e)
	}
	return 0, ""
}

// conn classifies a subscriber event, remembering which nodes are down.
func (s *slogObserver) conn(e Event) (slog.Level, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Conn {
	case ConnDown:
		s.down[e.Node] = true
		return slog.LevelWarn, "locksmith: pub/sub connection down; waiters poll"
	case ConnUp:
		if s.down[e.Node] {
			delete(s.down, e.Node)
			return slog.LevelInfo, "locksmith: pub/sub connection up again"
		}
		return slog.LevelDebug, "locksmith: pub/sub connection up"
	case ConnReplaced:
		return slog.LevelDebug, "locksmith: pub/sub connection replaced"
	case ConnClosed:
		delete(s.down, e.Node)
		return slog.LevelDebug, "locksmith: pub/sub connection closed"
	}
	return 0, ""
}

// attrsOf returns the attributes of e's record: those that apply to its
// kind.
func attrsOf(e Event) []slog.Attr {
	attrs := make([]slog.Attr, 0, 8)
	if e.Kind != EventSubscriber {
		attrs = append(attrs, slog.String("key", e.Key))
		if e.Prefix != "" {
			attrs = append(attrs, slog.String("prefix", e.Prefix))
		}
	}
	switch e.Kind {
	case EventObtain:
		attrs = append(attrs, slog.String("hold", e.Hold.String()), slog.Duration("waited", e.Waited),
			slog.Int("attempts", e.Attempts))
		if e.HandedOver {
			attrs = append(attrs, slog.Bool("handed_over", true))
		}
	case EventRelease, EventRenewal, EventLeaseLost:
		attrs = append(attrs, slog.String("hold", e.Hold.String()), slog.Duration("held", e.Held))
	case EventOnce:
		attrs = append(attrs, slog.String("once", e.Once.String()))
	case EventSubscriber:
		attrs = append(attrs, slog.String("conn", e.Conn.String()))
		if e.Node != "" {
			attrs = append(attrs, slog.String("node", e.Node))
		}
		if e.Attempts > 0 {
			attrs = append(attrs, slog.Int("attempts", e.Attempts))
		}
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("class", e.Class.String()), slog.String("error", e.Err.Error()))
	}
	return attrs
}
