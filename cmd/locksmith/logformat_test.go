//go:build unix

package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A logRecord is one line that --log-format json writes to stderr.
type logRecord map[string]any

// records parses what p wrote to stderr with --log-format json, failing t
// for a line that is not a JSON object: in that mode every line must be.
func records(t *testing.T, p *proc) []logRecord {
	t.Helper()
	var recs []logRecord
	for line := range strings.Lines(p.errOut(t)) {
		if !strings.HasSuffix(line, "\n") {
			break // still being written
		}
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("locksmith %q: stderr line %q is not a JSON object: %v", p.cmd.Args[1:], line, err)
		}
		for _, field := range []string{"time", "level", "msg"} {
			if _, ok := r[field].(string); !ok {
				t.Errorf("record %s has no %s", line, field)
			}
		}
		recs = append(recs, r)
	}
	return recs
}

// msgs returns the msg of each record.
func msgs(recs []logRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r["msg"].(string))
	}
	return out
}

// find returns the first record whose msg is msg, and its index; it fails
// t if there is none.
func find(t *testing.T, recs []logRecord, msg string) (logRecord, int) {
	t.Helper()
	for i, r := range recs {
		if r["msg"] == msg {
			return r, i
		}
	}
	t.Fatalf("no %q record in %v", msg, msgs(recs))
	return nil, -1
}

// num returns the number in field of r, failing t if there is none.
func num(t *testing.T, r logRecord, field string) float64 {
	t.Helper()
	n, ok := r[field].(float64)
	if !ok {
		t.Fatalf("record %v: %s is %v, want a number", r, field, r[field])
	}
	return n
}

// inOrder fails t unless the records named come in this order.
func inOrder(t *testing.T, recs []logRecord, names ...string) {
	t.Helper()
	last, prev := -1, ""
	for _, name := range names {
		_, i := find(t, recs, name)
		if i <= last {
			t.Errorf("records %v: %q does not come after %q", msgs(recs), name, prev)
		}
		last, prev = i, name
	}
}

// A run that waits for the lock says how long it waited, how many
// attempts it made and whether the lock was handed over, then what its
// command did, and never the token.
func TestRunLogJSONWaitsThenAcquires(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	// Both take fencing tokens: a release hands the lock only to a waiter
	// whose fencing it can serve (see lock_release.lua).
	holder := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--fencing", "--"},
		script(dir, `touch "$1/holding"; while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/holding") }, "the holder did not start")
	waiter := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--wait", "60s", "--fencing",
		"--log-format", "json", "--"}, script(dir, `echo "$LOCKSMITH_TOKEN" > "$1/token"`)...)...)
	eventually(t, 20*time.Second, func() bool { return status(t, url, key).Queued == 1 }, "the waiter did not queue")
	touch(t, dir+"/finish")
	holder.expect(t, 0)
	waiter.expect(t, 0)

	recs := records(t, waiter)
	inOrder(t, recs, "acquired", "child_started", "child_exited", "released", "exit")
	acquired, _ := find(t, recs, "acquired")
	if acquired["key"] != key || acquired["level"] != "INFO" || acquired["hold"] != "lock" ||
		num(t, acquired, "waited_ms") <= 0 || num(t, acquired, "attempts") < 1 ||
		num(t, acquired, "ttl_ms") != 30000 || num(t, acquired, "fence") <= 0 {
		t.Errorf("acquired: %v; want key %q, a wait, attempts, ttl_ms 30000 and a fence", acquired, key)
	}
	// The holder's release handed the lock to the queued waiter, whether
	// the waiter heard it or found it at its next attempt.
	if acquired["handed_over"] != true {
		t.Errorf("acquired: %v, want handed_over true", acquired)
	}
	if started, _ := find(t, recs, "child_started"); num(t, started, "pid") <= 0 || started["command"] != "sh" {
		t.Errorf("child_started: %v, want the pid and sh", started)
	}
	if exited, _ := find(t, recs, "child_exited"); num(t, exited, "status") != 0 {
		t.Errorf("child_exited: %v, want status 0", exited)
	}
	if released, _ := find(t, recs, "released"); released["hold"] != "lock" || num(t, released, "held_ms") < 0 {
		t.Errorf("released: %v", released)
	}
	if exit := recs[len(recs)-1]; exit["msg"] != "exit" || num(t, exit, "status") != 0 {
		t.Errorf("last record %v, want exit with status 0", exit)
	}
	token := strings.TrimSpace(readFile(t, dir+"/token"))
	if token == "" || strings.Contains(waiter.errOut(t), token) {
		t.Errorf("the token %q is in the log:\n%s", token, waiter.errOut(t))
	}
}

// A lock deleted behind run's back: the log says it was lost, why, and
// that the command got SIGTERM.
func TestRunLogJSONLockLost(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "2s", "--log-format", "json", "--"},
		// The shell's own notes go elsewhere: stderr is for the records.
		script(dir, `exec 2>/dev/null; trap 'exit 143' TERM
			echo "$LOCKSMITH_TOKEN" > "$1/token"
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
		"the command did not start")
	if err := client.Del(t.Context(), "locksmith:"+key).Err(); err != nil {
		t.Fatal(err)
	}
	p.expect(t, 79)
	recs := records(t, p)
	inOrder(t, recs, "acquired", "child_started", "lost", "child_killed", "child_exited", "exit")
	if lost, _ := find(t, recs, "lost"); lost["level"] != "ERROR" || lost["cause"] == nil || lost["cause"] == "" || lost["child_started"] != true {
		t.Errorf("lost: %v, want an error with its cause", lost)
	}
	if killed, _ := find(t, recs, "child_killed"); killed["signal"] != "SIGTERM" || num(t, killed, "grace_ms") != 10000 {
		t.Errorf("child_killed: %v, want SIGTERM and the grace period", killed)
	}
	if exited, _ := find(t, recs, "child_exited"); num(t, exited, "status") != 143 {
		t.Errorf("child_exited: %v, want status 143", exited)
	}
	if exit := recs[len(recs)-1]; num(t, exit, "status") != 79 {
		t.Errorf("last record %v, want exit with status 79", exit)
	}
	if token := strings.TrimSpace(readFile(t, dir+"/token")); strings.Contains(p.errOut(t), token) {
		t.Errorf("the token %q is in the log:\n%s", token, p.errOut(t))
	}
}

// Runs that run nothing say why: the job is done (--once), or the lock is
// held elsewhere; --skip-ok changes only the exit status.
func TestRunLogJSONSkipped(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	args := []string{"run", "--redis", url, "--key", key, "--once", "--log-format", "json"}

	first := start(t, nil, append(args, "--", "touch", dir+"/ran")...)
	first.expect(t, 0)
	inOrder(t, records(t, first), "acquired", "child_exited", "released", "recorded", "exit")

	for _, tc := range []struct {
		flags []string
		want  int
	}{{nil, 80}, {[]string{"--skip-ok"}, 0}} {
		p := start(t, nil, append(append(args, tc.flags...), "--", "touch", dir+"/ran-again")...)
		p.expect(t, tc.want)
		recs := records(t, p)
		if got := msgs(recs); len(got) != 2 || got[0] != "skipped" || got[1] != "exit" {
			t.Errorf("%q: records %v, want skipped and exit", tc.flags, got)
		}
		if recs[0]["reason"] != "done" || num(t, recs[1], "status") != float64(tc.want) {
			t.Errorf("%q: records %v, want reason done and exit status %d", tc.flags, recs, tc.want)
		}
	}

	held := uniqueKey(t)
	if err := client.Set(t.Context(), "locksmith:"+held, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "run", "--redis", url, "--key", held, "--skip-ok", "--log-format", "json", "--", "touch", dir+"/ran-again")
	p.expect(t, 0)
	if recs := records(t, p); len(recs) != 2 || recs[0]["msg"] != "skipped" || recs[0]["reason"] != "held" ||
		recs[0]["key"] != held || num(t, recs[1], "status") != 0 {
		t.Errorf("held elsewhere: records %v, want skipped (held) and exit 0", recs)
	}
	if exists(dir + "/ran-again") {
		t.Error("a skipped run ran its command")
	}
}

// Errors are records too: nothing else reaches stderr.
func TestRunLogJSONRedisDown(t *testing.T) {
	t.Parallel()
	p := start(t, nil, "run", "--redis", "redis://"+closedPort(t), "--key", "k", "--log-format", "json", "--", "true")
	p.expect(t, 69)
	recs := records(t, p)
	if got := msgs(recs); len(got) != 2 || got[0] != "error" || got[1] != "exit" ||
		!strings.Contains(recs[0]["error"].(string), "connection refused") {
		t.Errorf("records %v, want an error saying the connection was refused, and exit", recs)
	}
}

// A candidate's log: elected, its command, resigned.
func TestElectLogJSON(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	name, dir := uniqueKey(t), t.TempDir()
	p := elect(t, url, name, "db1:4242", dir, `echo "$LOCKSMITH_TOKEN" > "$1/token"`,
		"--exit-with-command", "--log-format", "json")
	p.expect(t, 0)
	recs := records(t, p)
	inOrder(t, recs, "elected", "child_started", "child_exited", "resigned", "exit")
	if e, _ := find(t, recs, "elected"); e["key"] != name || e["value"] != "db1:4242" || e["hold"] != "term" ||
		num(t, e, "fence") <= 0 || num(t, e, "attempts") < 1 {
		t.Errorf("elected: %v, want the value, a fence and the attempts", e)
	}
	if token := strings.TrimSpace(readFile(t, dir+"/token")); token == "" || strings.Contains(p.errOut(t), token) {
		t.Errorf("the token %q is in the log:\n%s", token, p.errOut(t))
	}
}

// A set of locks that waits for a key held by another run is handed it:
// its records name the set and say what the library tried, as a lock's
// do.
func TestRunLogJSONSetWaitsThenAcquires(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	holder := start(t, nil, append([]string{"run", "--redis", url, "--key", b, "--"},
		script(dir, `touch "$1/holding"; while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/holding") }, "the holder did not start")
	waiter := start(t, nil, append([]string{"run", "--redis", url, "--key", a, "--key", b, "--wait", "60s",
		"--log-format", "json", "--"}, script(dir, `true`)...)...)
	eventually(t, 20*time.Second, func() bool { return status(t, url, b).Queued == 1 }, "the set did not queue")
	touch(t, dir+"/finish")
	holder.expect(t, 0)
	waiter.expect(t, 0)

	recs := records(t, waiter)
	inOrder(t, recs, "acquired", "child_started", "child_exited", "released", "exit")
	acquired, _ := find(t, recs, "acquired")
	keys, _ := acquired["keys"].([]any)
	if len(keys) != 2 || keys[0] != a || keys[1] != b || acquired["hold"] != "lock" ||
		num(t, acquired, "attempts") < 1 || acquired["handed_over"] != true {
		t.Errorf("acquired: %v; want keys [%q %q], hold lock, attempts and handed_over true", acquired, a, b)
	}
	if released, _ := find(t, recs, "released"); released["hold"] != "lock" || num(t, released, "held_ms") < 0 {
		t.Errorf("released: %v", released)
	}
}
