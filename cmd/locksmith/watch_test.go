//go:build unix

package main_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	library "github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// watchLine is a line of status --watch --json: any of status --json's
// objects, with its time.
type watchLine struct {
	Time    *time.Time `json:"time"`
	Key     string     `json:"key"`
	Kind    string     `json:"kind"`
	Held    bool       `json:"held"`
	Token   string     `json:"token"`
	Mark    string     `json:"token_mark"`
	Holders []struct {
		Mark string `json:"token_mark"`
	} `json:"holders"`
	Readers []struct {
		Mark string `json:"token_mark"`
	} `json:"readers"`
	Writer *struct {
		Mark string `json:"token_mark"`
	} `json:"writer"`
}

// watched returns the complete lines p printed with status --watch --json.
func watched(t *testing.T, p *proc) []watchLine {
	t.Helper()
	var got []watchLine
	for line := range strings.Lines(p.out(t)) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		var l watchLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("status --watch --json printed %q: %v", line, err)
		}
		if l.Time == nil {
			t.Errorf("line %q has no time", line)
		}
		got = append(got, l)
	}
	return got
}

// watchStatus starts status --watch on key, with the extra flags.
func watchStatus(t *testing.T, url, key string, flags ...string) *proc {
	t.Helper()
	return start(t, nil, append([]string{"status", "--redis", url, "--key", key, "--watch"}, flags...)...)
}

// waitLines waits until p has printed n lines with --json, and returns
// the nth.
func waitLines(t *testing.T, p *proc, n int, what string) watchLine {
	t.Helper()
	var got []watchLine
	eventually(t, 20*time.Second, func() bool { got = watched(t, p); return len(got) >= n },
		"%s: line %d not printed; got %+v, stderr %q", what, n, &got, p.errOut(t))
	return got[n-1]
}

// stop sends p SIGINT and fails t unless it exits 0.
func stop(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.expect(t, 0)
}

// status --watch follows a lock from free to held, to free again, to held
// by someone else, a line each (the time left, which changes at every
// read, prints none), and exits 0 on SIGINT.
func TestStatusWatchLock(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	rkey := "locksmith:" + key
	jsonWatch := watchStatus(t, url, key, "--json", "--interval", "100ms")
	textWatch := watchStatus(t, url, key, "--interval", "100ms")
	both := func(n int, what string) watchLine {
		t.Helper()
		eventually(t, 20*time.Second, func() bool { return strings.Count(textWatch.out(t), "\n") >= n },
			"%s: the text watch printed %q", what, textWatch.out(t))
		return waitLines(t, jsonWatch, n, what)
	}
	if l := both(1, "free"); l.Held || l.Key != key {
		t.Fatalf("first line %+v, want %q free", l, key)
	}
	client.Set(t.Context(), rkey, "tok-a", time.Minute)
	if l := both(2, "held by a"); !l.Held || l.Mark != mark("tok-a") {
		t.Fatalf("second line %+v, want held by tok-a", l)
	}
	client.Del(t.Context(), rkey)
	if l := both(3, "free again"); l.Held {
		t.Fatalf("third line %+v, want free", l)
	}
	client.Set(t.Context(), rkey, "tok-b", time.Minute)
	if l := both(4, "held by b"); !l.Held || l.Mark != mark("tok-b") {
		t.Fatalf("fourth line %+v, want held by tok-b", l)
	}
	stop(t, jsonWatch)
	stop(t, textWatch)
	if got := watched(t, jsonWatch); len(got) != 4 {
		t.Errorf("--json printed %d lines, want 4: %+v", len(got), got)
	}
	text := strings.Split(strings.TrimSuffix(textWatch.out(t), "\n"), "\n")
	want := []string{"is free", "is held by token #" + mark("tok-a"), "is free", "is held by token #" + mark("tok-b")}
	if len(text) != len(want) {
		t.Fatalf("the text watch printed %q, want %d lines", text, len(want))
	}
	for i, line := range text {
		if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.Fields(line)[0]); err != nil ||
			!strings.Contains(line, want[i]) {
			t.Errorf("line %d: %q, want a time and %q", i+1, line, want[i])
		}
	}
}

// With an interval too long to matter, a lock's handoff and release
// still show at once: the watch hears them announced.
func TestStatusWatchHearsReleases(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	// Two Lockers: two processes, as far as Redis can tell.
	holder := library.New(client, library.WithPrefix("locksmith:"), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = holder.Close() })
	waiter := library.New(client, library.WithPrefix("locksmith:"), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = waiter.Close() })
	a, err := holder.Obtain(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	w := watchStatus(t, url, key, "--json", "--interval", "1h")
	if l := waitLines(t, w, 1, "held by a"); !l.Held || l.Mark != mark(a.Token()) {
		t.Fatalf("first line %+v, want held by %q", l, a.Token())
	}
	// b waits, retrying only every hour: only a handoff gives it the lock.
	type obtained struct {
		lk  *library.Lock
		err error
	}
	got := make(chan obtained, 1)
	go func() {
		lk, err := waiter.Obtain(t.Context(), key, library.WithRetry(library.LinearBackoff(time.Hour)))
		got <- obtained{lk, err}
	}()
	eventually(t, 20*time.Second, func() bool { return status(t, url, key).Queued == 1 }, "b did not queue")
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b.err != nil {
		t.Fatal(b.err)
	}
	if l := waitLines(t, w, 2, "handed to b"); !l.Held || l.Mark != mark(b.lk.Token()) {
		t.Fatalf("second line %+v, want held by %q", l, b.lk.Token())
	}
	if err := b.lk.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l := waitLines(t, w, 3, "released"); l.Held {
		t.Fatalf("third line %+v, want free", l)
	}
	stop(t, w)
}

// Semaphores and read-write locks are followed as status shows them.
func TestStatusWatchSemaphoreAndRWLock(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	locker := library.New(client, library.WithPrefix("locksmith:"), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	ctx := t.Context()

	t.Run("semaphore", func(t *testing.T) {
		key := uniqueKey(t)
		sem := locker.Semaphore(key, 2)
		first, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := watchStatus(t, url, key, "--json", "--interval", "100ms")
		if l := waitLines(t, w, 1, "one permit"); l.Kind != "semaphore" || len(l.Holders) != 1 {
			t.Fatalf("first line %+v, want a semaphore with one permit held", l)
		}
		second, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l := waitLines(t, w, 2, "two permits"); len(l.Holders) != 2 {
			t.Fatalf("second line %+v, want two permits held", l)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l := waitLines(t, w, 3, "one left"); len(l.Holders) != 1 || l.Holders[0].Mark != mark(second.Token()) {
			t.Fatalf("third line %+v, want the second permit only", l)
		}
		stop(t, w)
		_ = second.Release(ctx)
	})

	t.Run("rwlock", func(t *testing.T) {
		key := uniqueKey(t)
		m := locker.RWMutex(key)
		reader, err := m.ObtainRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := watchStatus(t, url, key, "--json", "--interval", "100ms")
		if l := waitLines(t, w, 1, "a reader"); l.Kind != "rwlock" || len(l.Readers) != 1 || l.Writer != nil {
			t.Fatalf("first line %+v, want a read-write lock with one reader", l)
		}
		if err := reader.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l := waitLines(t, w, 2, "free"); len(l.Readers) != 0 || l.Writer != nil {
			t.Fatalf("second line %+v, want no holder", l)
		}
		writer, err := m.ObtainWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l := waitLines(t, w, 3, "a writer"); l.Writer == nil || l.Writer.Mark != mark(writer.Token()) {
			t.Fatalf("third line %+v, want the writer", l)
		}
		stop(t, w)
		_ = writer.Release(ctx)
	})
}

// When Redis goes away, the watch says so once, keeps trying, and says
// when it is back, printing the state again; the first read failing is
// exit 69, as for status.
func TestStatusWatchRedisAway(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	key := uniqueKey(t)
	w := watchStatus(t, redisURL(srv, 0), key, "--json", "--interval", "100ms")
	waitLines(t, w, 1, "free")
	srv.Kill()
	eventually(t, 20*time.Second, func() bool { return strings.Contains(w.errOut(t), "cannot read lock") },
		"no error line; stderr %q", w.errOut(t))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() bool { return strings.Contains(w.errOut(t), "answers again") },
		"Redis came back unnoticed; stderr %q", w.errOut(t))
	if l := waitLines(t, w, 2, "after the outage"); l.Held {
		t.Errorf("line after the outage %+v, want free", l)
	}
	stop(t, w)
	if n := strings.Count(w.errOut(t), "cannot read lock"); n != 1 {
		t.Errorf("the outage was reported %d times, want once:\n%s", n, w.errOut(t))
	}

	code, stdout, stderr := locksmith(t, nil, "status", "--redis", "redis://"+closedPort(t), "--key", key, "--watch")
	if code != 69 || stdout != "" || !strings.Contains(stderr, "connection refused") {
		t.Errorf("status --watch without Redis: exit %d, stdout %q, stderr %q; want 69 and the error", code, stdout, stderr)
	}
}
