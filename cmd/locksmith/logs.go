package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/locksmith-go/locksmith"
)

// What run and elect report on stderr: with --log-format text (the
// default) the messages for people they always printed, and nothing
// else; with --log-format json one JSON object a line for each thing they
// do, written by log/slog's JSONHandler. docs/cli.md lists the records
// and their fields.

// The values of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

// startLog sets up the JSON log when format asks for one: every message to
// stderr is then a record, with key among its attributes when it is not
// empty. It returns an error for a format it does not know.
func (u *ui) startLog(format, key string) error {
	switch format {
	case logText:
		return nil
	case logJSON:
	default:
		return fmt.Errorf("--log-format %q: want %s or %s", format, logText, logJSON)
	}
	log := slog.New(slog.NewJSONHandler(redactor{u}, nil))
	if key != "" {
		log = log.With(slog.String("key", key))
	}
	u.log = log
	return nil
}

// report tells of one thing run or elect did. In text mode it prints
// text, if it is not empty, as errorf does; in JSON mode it writes a
// record at level whose msg is event, with attrs, unless event is empty
// (text that JSON mode says with other records).
func (u *ui) report(level slog.Level, event, text string, attrs ...slog.Attr) {
	if u.log == nil {
		if text != "" {
			u.errorf("%s", text)
		}
		return
	}
	if event != "" {
		u.log.LogAttrs(context.Background(), level, event, attrs...)
	}
}

// record writes a record of the JSON log made at t, for an event of the
// library, which reaches the log later than it happened.
func (u *ui) record(t time.Time, level slog.Level, event string, attrs ...slog.Attr) {
	r := slog.NewRecord(t, level, event, 0)
	r.AddAttrs(attrs...)
	_ = u.log.Handler().Handle(context.Background(), r)
}

// logExit writes the last record of the JSON log, with the exit status.
func (u *ui) logExit(code int) {
	if u.log != nil {
		u.log.LogAttrs(context.Background(), slog.LevelInfo, "exit", slog.Int("status", code))
	}
}

// redactor writes the JSON log to u's stderr with every secret replaced,
// as errorf replaces them in text: as written, and as JSON escapes it.
// The handler writes each record with one Write.
type redactor struct{ u *ui }

func (r redactor) Write(p []byte) (int, error) {
	s := string(p)
	for _, secret := range r.u.secrets {
		if secret == "" {
			continue
		}
		for _, form := range jsonForms(secret) {
			s = strings.ReplaceAll(s, form, "xxxxx")
		}
	}
	if _, err := io.WriteString(r.u.stderr, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonForms returns s as written and as a JSON string holds it, with and
// without the escaping of <, > and &.
func jsonForms(s string) []string {
	unquote := func(q string) string { return strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`) }
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	html, _ := json.Marshal(s)
	return []string{s, unquote(strings.TrimSuffix(b.String(), "\n")), unquote(string(html))}
}

// millis returns d in whole milliseconds, as the records give durations.
func millis(name string, d time.Duration) slog.Attr {
	return slog.Int64(name, d.Milliseconds())
}

// libraryEvents is the Locker's observer and tracer in JSON mode. As
// observer, it writes a record for what the library does behind run's
// back (a failed renewal, the release at the end of WithLock, a success
// recorded by Once, the pub/sub connection going down and coming back).
// As tracer, it keeps what the last successful obtain tried (see End),
// which the goroutine that made the call puts in the record of it, with
// what only that goroutine knows (the fencing token). Lost leases are
// reported by the supervisor, which stops COMMAND, and resignations by
// elect, which makes them.
type libraryEvents struct {
	u    *ui
	down bool // a pub/sub connection was reported down; only Observe uses it

	mu   sync.Mutex // guards last
	last obtained
}

// obtained is what a successful obtain tried, as its Tracer.End says.
type obtained struct {
	ok         bool // an obtain succeeded
	hold       locksmith.Hold
	attempts   int
	handedOver bool
}

func newLibraryEvents(u *ui) *libraryEvents { return &libraryEvents{u: u} }

// Start passes ctx on: libraryEvents traces no span.
func (le *libraryEvents) Start(ctx context.Context, _ locksmith.Call) context.Context { return ctx }

// End keeps what an obtain that succeeded tried. It is called on the
// goroutine of the call, before the call returns (or, in WithLock and
// Once, runs the function): so obtainAttrs, on that goroutine, reads it
// afterwards.
func (le *libraryEvents) End(_ context.Context, c locksmith.Call, o locksmith.Outcome) {
	if c.Op != locksmith.OpObtain || o.Err != nil {
		return
	}
	le.mu.Lock()
	le.last = obtained{ok: true, hold: c.Hold, attempts: o.Attempts, handedOver: o.HandedOver}
	le.mu.Unlock()
}

// Observe is called by one goroutine of the Locker at a time.
func (le *libraryEvents) Observe(e locksmith.Event) {
	u := le.u
	if e.Dropped > 0 {
		u.record(e.Time, slog.LevelWarn, "events_dropped", slog.Uint64("dropped", e.Dropped))
	}
	hold := slog.String("hold", e.Hold.String())
	switch e.Kind {
	case locksmith.EventRenewal:
		if e.Err != nil {
			u.record(e.Time, slog.LevelWarn, "renewal_failed", hold, millis("held_ms", e.Held),
				slog.String("class", e.Class.String()), slog.String("error", errText(e.Err)))
		}
	case locksmith.EventRelease:
		switch {
		case e.Hold == locksmith.HoldTerm:
			// elect reports its resignations.
		case e.Err == nil:
			u.record(e.Time, slog.LevelInfo, "released", hold, millis("held_ms", e.Held))
		default:
			u.record(e.Time, slog.LevelWarn, "release_failed", hold, millis("held_ms", e.Held),
				slog.String("class", e.Class.String()), slog.String("error", errText(e.Err)))
		}
	case locksmith.EventOnce:
		if e.Once == locksmith.OnceRecorded {
			u.record(e.Time, slog.LevelInfo, "recorded")
		}
	case locksmith.EventSubscriber:
		switch {
		case e.Conn == locksmith.ConnDown && !le.down:
			le.down = true
			u.record(e.Time, slog.LevelWarn, "subscriber_down", slog.String("error", errText(e.Err)))
		case e.Conn == locksmith.ConnUp && le.down:
			le.down = false
			u.record(e.Time, slog.LevelInfo, "subscriber_up")
		}
	}
}

// obtainAttrs returns the attributes of the record of a hold obtained at
// the end of a call that started at start, with ttl and, if fenced, fence.
func (le *libraryEvents) obtainAttrs(start time.Time, ttl time.Duration, fence int64, fenced bool) []slog.Attr {
	le.mu.Lock()
	last := le.last
	le.mu.Unlock()
	attrs := []slog.Attr{millis("waited_ms", time.Since(start))}
	if last.ok {
		attrs = append(attrs, slog.String("hold", last.hold.String()), slog.Int("attempts", last.attempts),
			slog.Bool("handed_over", last.handedOver))
	}
	attrs = append(attrs, millis("ttl_ms", ttl))
	if fenced {
		attrs = append(attrs, slog.Int64("fence", fence))
	}
	return attrs
}
