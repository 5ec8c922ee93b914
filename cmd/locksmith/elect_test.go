//go:build unix

package main_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A candidate's term, as its command records it in the file terms: one
// line "VALUE FENCE PID" when it starts.
type termLine struct {
	value string
	fence int64
	pid   int
}

// terms returns the terms recorded in dir/terms.
func terms(t *testing.T, dir string) []termLine {
	t.Helper()
	var got []termLine
	for line := range strings.Lines(readFile(t, dir+"/terms")) {
		if !strings.HasSuffix(line, "\n") {
			break // still being written
		}
		var tl termLine
		if _, err := fmt.Sscan(line, &tl.value, &tl.fence, &tl.pid); err != nil {
			t.Fatalf("terms: line %q: %v", line, err)
		}
		got = append(got, tl)
	}
	return got
}

// waitTerms waits until dir/terms records n terms, and returns the nth.
func waitTerms(t *testing.T, dir string, n int) termLine {
	t.Helper()
	var got []termLine
	eventually(t, 20*time.Second, func() bool { got = terms(t, dir); return len(got) >= n }, "%d terms recorded", n)
	if len(got) > n {
		t.Fatalf("terms: %v, want %d", got, n)
	}
	return got[n-1]
}

// recordTerm is the start of a command that records its term in $1/terms.
const recordTerm = `echo "$LOCKSMITH_VALUE $LOCKSMITH_FENCE $$" >> "$1/terms"
`

// elect starts a candidate in the election name with value, whose command
// runs src with $1 set to dir.
func elect(t *testing.T, url, name, value, dir, src string, flags ...string) *proc {
	t.Helper()
	args := append([]string{"elect", "--redis", url, "--name", name, "--value", value}, flags...)
	return start(t, nil, append(append(args, "--"), script(dir, src)...)...)
}

// Two candidates: one command runs at a time; the other candidate takes
// over at once when the leader's command exits (the leader resigns), and
// after the TTL when the leader's locksmith is killed.
func TestElectTakeover(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	name, dir := uniqueKey(t), t.TempDir()
	// Each command holds the file running, created with O_EXCL
	// (noclobber): a second leader's command would find it there.
	const src = `set -C
		if ! : > "$1/running" 2>/dev/null; then echo overlap >> "$1/overlap"; exit 3; fi
		` + recordTerm + `
		while [ ! -e "$1/finish-$LOCKSMITH_VALUE" ]; do sleep 0.05; done
		rm "$1/finish-$LOCKSMITH_VALUE" "$1/running"`
	const ttl = 3 * time.Second
	procs := map[string]*proc{}
	for _, v := range []string{"a", "b"} {
		procs[v] = elect(t, url, name, v, dir, src, "--ttl", ttl.String())
	}
	other := map[string]string{"a": "b", "b": "a"}
	queued := func(what string) {
		t.Helper()
		var st statusJSON
		eventually(t, 20*time.Second, func() bool { st = status(t, url, name); return st.Held && st.Queued == 1 },
			"%s: status %+v, want held and one candidate queued", what, &st)
	}

	first := waitTerms(t, dir, 1)
	queued("the other candidate waits")
	if got := terms(t, dir); len(got) != 1 {
		t.Fatalf("terms %v while the first leader's command runs", got)
	}

	// The leader's command exits: the other candidate leads at once.
	touch(t, dir+"/finish-"+first.value)
	second := waitTerms(t, dir, 2)
	if second.value != other[first.value] || second.fence <= first.fence {
		t.Fatalf("second term %+v after %+v; want the other candidate, with a larger fence", second, first)
	}
	if procs[first.value].exited() {
		t.Fatalf("%s exited after its command did; want it to campaign again: %s", first.value, procs[first.value].errOut(t))
	}
	queued("the first leader campaigns again")

	// The leader's locksmith is killed: its command is killed with it,
	// and the other candidate leads once the TTL has run out.
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	killAtEnd(t, second.pid)
	if err := procs[second.value].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 10*time.Second, func() bool { return !alive(second.pid) }, "the command outlived locksmith")
	if got := terms(t, dir); len(got) != 2 {
		t.Fatalf("terms %v before the killed leader's command had died", got)
	}
	removeFile(t, dir+"/running") // the killed command could not
	third := waitTerms(t, dir, 3)
	took := time.Since(killed)
	t.Logf("the candidate took over %v after the leader was killed (TTL %v)", took, ttl)
	if third.value != first.value || third.fence <= second.fence {
		t.Fatalf("third term %+v after %+v; want the surviving candidate, with a larger fence", third, second)
	}
	if took < ttl/2 {
		t.Errorf("took over %v after the kill, want about the TTL %v", took, ttl)
	}

	// SIGTERM: passed on to the command, which dies of it; locksmith
	// resigns and exits with the command's status.
	if err := procs[third.value].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	procs[third.value].expect(t, 128+15)
	if st := status(t, url, name); st.Held {
		t.Errorf("status after the leader exited: %+v, want the election resigned", st)
	}
	if exists(dir + "/overlap") {
		t.Error("two commands ran at the same time")
	}
}

func removeFile(t *testing.T, name string) {
	t.Helper()
	if err := syscall.Unlink(name); err != nil {
		t.Fatal(err)
	}
}

// A command that traps SIGTERM, records it in $1/got-term and exits 143;
// it records its term first.
const termTrap = `trap 'echo TERM >> "$1/got-term"; exit 143' TERM
	` + recordTerm + `
	while :; do sleep 0.05; done`

// When leadership is lost, the command is stopped as run stops it; then
// elect campaigns again, or with --exit-with-command exits 79.
func TestElectLost(t *testing.T) {
	t.Parallel()
	url, client := shared(t)

	t.Run("deleted", func(t *testing.T) {
		t.Parallel()
		name, dir := uniqueKey(t), t.TempDir()
		p := elect(t, url, name, "a", dir, termTrap, "--ttl", "3s")
		first := waitTerms(t, dir, 1)
		if err := client.Del(t.Context(), "locksmith:"+name).Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
		second := waitTerms(t, dir, 2)
		if second.fence <= first.fence {
			t.Errorf("fence %d after %d, want larger", second.fence, first.fence)
		}
		if errOut := p.errOut(t); !strings.Contains(errOut, "lost leadership") || !strings.Contains(errOut, "campaigning again") {
			t.Errorf("stderr %q does not say leadership was lost and campaigned for again", errOut)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.expect(t, 128+15)
	})

	t.Run("deleted, exit with command", func(t *testing.T) {
		t.Parallel()
		name, dir := uniqueKey(t), t.TempDir()
		p := elect(t, url, name, "a", dir, termTrap, "--ttl", "3s", "--exit-with-command")
		waitTerms(t, dir, 1)
		if err := client.Del(t.Context(), "locksmith:"+name).Err(); err != nil {
			t.Fatal(err)
		}
		p.expect(t, 79)
		if !exists(dir + "/got-term") {
			t.Error("the command got no SIGTERM")
		}
	})

	t.Run("redis paused", func(t *testing.T) {
		t.Parallel()
		// A server of its own, paused past the TTL: renewals get no
		// answer, and the command is stopped when the term's validity
		// runs out, while Redis is still paused.
		srv := redistest.New(t)
		name, dir := uniqueKey(t), t.TempDir()
		p := elect(t, redisURL(srv, 0), name, "a", dir, termTrap, "--ttl", "1500ms", "--timeout", "500ms")
		first := waitTerms(t, dir, 1)
		if err := syscall.Kill(srv.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		t.Cleanup(func() { _ = syscall.Kill(srv.Pid(), syscall.SIGCONT) })
		eventually(t, 10*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
		t.Logf("SIGTERM %v after Redis was paused (TTL 1.5s)", time.Since(paused))
		if err := syscall.Kill(srv.Pid(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		second := waitTerms(t, dir, 2)
		if second.fence <= first.fence {
			t.Errorf("fence %d after %d, want larger", second.fence, first.fence)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.expect(t, 128+15)
	})
}

func TestElectExitWithCommand(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	for _, tc := range []struct {
		name    string
		command []string
		want    int
	}{
		{"success", []string{"true"}, 0},
		{"own status", []string{"sh", "-c", "exit 7"}, 7},
		{"killed by SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{"not found", []string{"no-such-command-for-locksmith"}, 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := uniqueKey(t)
			p := start(t, nil, append([]string{"elect", "--redis", url, "--name", name, "--exit-with-command", "--"}, tc.command...)...)
			p.expect(t, tc.want)
			if n := client.Exists(t.Context(), "locksmith:"+name).Val(); n != 0 {
				t.Errorf("the election's lock is still there after locksmith exited")
			}
		})
	}
}

// leaderLine is a line of elect --observe --json.
type leaderLine struct {
	Name      string  `json:"name"`
	Leader    bool    `json:"leader"`
	Value     *string `json:"value"`
	Fence     int64   `json:"fence"`
	TTLMillis *int64  `json:"ttl_ms"`
}

func observed(t *testing.T, p *proc) []leaderLine {
	t.Helper()
	var got []leaderLine
	for line := range strings.Lines(p.out(t)) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		var l leaderLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("elect --observe --json printed %q: %v", line, err)
		}
		got = append(got, l)
	}
	return got
}

// Observers print the leader, and each change, as it happens.
func TestElectObserve(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	name, dir := uniqueKey(t), t.TempDir()
	jsonObs := start(t, nil, "elect", "--redis", url, "--name", name, "--observe", "--json")
	textObs := start(t, nil, "elect", "--redis", url, "--name", name, "--observe")
	var lines []leaderLine
	// seen waits until both observers have printed n lines.
	seen := func(n int, what string) leaderLine {
		t.Helper()
		eventually(t, 20*time.Second, func() bool {
			lines = observed(t, jsonObs)
			return len(lines) >= n && strings.Count(textObs.out(t), "\n") >= n
		}, "%s: printed %+v and %q", what, &lines, textObs.out(t))
		return lines[n-1]
	}
	if l := seen(1, "nobody"); l.Leader || l.Name != name {
		t.Fatalf("first line %+v, want no leader in %q", l, name)
	}

	const src = recordTerm + `while [ ! -e "$1/finish-$LOCKSMITH_VALUE" ]; do sleep 0.05; done`
	a := elect(t, url, name, "a", dir, src)
	ta := waitTerms(t, dir, 1)
	if l := seen(2, "a leads"); !l.Leader || l.Value == nil || *l.Value != "a" || l.Fence != ta.fence ||
		l.TTLMillis == nil || *l.TTLMillis <= 0 {
		t.Fatalf("second line %+v, want a leading with fence %d and a TTL", l, ta.fence)
	}
	b := elect(t, url, name, "b", dir, src)
	eventually(t, 20*time.Second, func() bool { return status(t, url, name).Queued == 1 }, "b did not queue")
	touch(t, dir+"/finish-a")
	tb := waitTerms(t, dir, 2)
	if l := seen(3, "b leads"); l.Value == nil || *l.Value != "b" || l.Fence != tb.fence {
		t.Fatalf("third line %+v, want b leading with fence %d", l, tb.fence)
	}

	// a campaigns again; a signal stops it while it waits.
	eventually(t, 20*time.Second, func() bool { return status(t, url, name).Queued == 1 }, "a did not queue again")
	if err := a.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	a.expect(t, 128+2)
	if errOut := a.errOut(t); !strings.Contains(errOut, "while campaigning") {
		t.Errorf("stderr %q does not say the campaign was interrupted", errOut)
	}
	// b's command dies of the SIGTERM passed on to it; b resigns.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b.expect(t, 128+15)
	if l := seen(4, "nobody again"); l.Leader {
		t.Fatalf("fourth line %+v, want no leader", l)
	}

	for _, obs := range []*proc{jsonObs, textObs} {
		if err := obs.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		obs.expect(t, 0)
	}
	if got := observed(t, jsonObs); len(got) != 4 {
		t.Errorf("--json printed %+v, want 4 lines", got)
	}
	want := fmt.Sprintf("no leader\nleader \"a\" fence %d\nleader \"b\" fence %d\nno leader\n", ta.fence, tb.fence)
	if got := textObs.out(t); got != want {
		t.Errorf("--observe printed\n%s\nwant\n%s", got, want)
	}
}

// Without Redis, a candidate keeps trying and says so; with
// --exit-with-command it exits 69, as run does, and so does an observer.
func TestElectRedisDown(t *testing.T) {
	t.Parallel()
	url, dir := "redis://"+closedPort(t), t.TempDir()
	candidate := start(t, nil, "elect", "--redis", url, "--name", "n", "--", "touch", dir+"/ran")
	for _, args := range [][]string{
		{"elect", "--redis", url, "--name", "n", "--exit-with-command", "--", "touch", dir + "/ran"},
		{"elect", "--redis", url, "--name", "n", "--observe"},
	} {
		code, _, stderr := locksmith(t, nil, args...)
		if code != 69 || !strings.Contains(stderr, "connection refused") {
			t.Errorf("%q: exit %d, stderr %q; want 69 and a connection error", args, code, stderr)
		}
	}
	eventually(t, 20*time.Second, func() bool { return strings.Count(candidate.errOut(t), "trying again") >= 2 },
		"the candidate did not report trying again: %q", candidate.errOut(t))
	if candidate.exited() {
		t.Fatalf("the candidate exited: %s", candidate.errOut(t))
	}
	if err := candidate.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	candidate.expect(t, 128+15)
	if exists(dir + "/ran") {
		t.Error("the command ran without leading")
	}
}

// Bad flags are reported, with exit status 64, before Redis is contacted
// (nothing listens at the URL: a command that tried would fail otherwise).
func TestElectUsageErrors(t *testing.T) {
	t.Parallel()
	url, dir := "redis://"+closedPort(t), t.TempDir()
	marker := dir + "/ran"
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--", "touch", marker}, "--name is required"},
		{[]string{"--name", "n"}, "no COMMAND"},
		{[]string{"--name", "n", "--observe", "--", "touch", marker}, "--observe runs no COMMAND"},
		{[]string{"--name", "n", "--json", "--", "touch", marker}, "--json needs --observe"},
		{[]string{"--name", "n", "--observe", "--value", "v"}, "--value is for a candidate"},
		{[]string{"--name", "n", "--observe", "--exit-with-command"}, "--exit-with-command is for a candidate"},
		{[]string{"--name", "n", "--observe", "--ttl", "5s"}, "--ttl is for a candidate"},
		{[]string{"--name", "n", "--ttl", "0s", "--", "touch", marker}, "--ttl 0s is not positive"},
		{[]string{"--name", "n", "--grace", "-1s", "--", "touch", marker}, "--grace -1s is negative"},
		{[]string{"--name", "n", "--timeout", "0s", "--", "touch", marker}, "--timeout"},
		{[]string{"--name", "n", "--key", "k", "--", "touch", marker}, "-key"},
		{[]string{"--name", "n", "--value", strings.Repeat("v", 4097), "--", "touch", marker}, "at most 4096"},
		{[]string{"--name", "~reserved", "--", "touch", marker}, "invalid argument"},
		{[]string{"--name", "~reserved", "--observe"}, "invalid argument"},
	} {
		args := append([]string{"elect", "--redis", url}, tc.args...)
		code, _, stderr := locksmith(t, nil, args...)
		if code != 64 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "locksmith help elect") {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 64 and %q", args, code, stderr, tc.want)
		}
	}
	if exists(marker) {
		t.Error("a command ran despite a usage error")
	}
}

func TestElectHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help", "elect"}, {"elect", "--help"}} {
		code, stdout, stderr := locksmith(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 0 and nothing", args, code, stderr)
		}
		for _, want := range []string{"Usage:", "Flags:", "--name NAME", "--value VALUE", "--observe", "--exit-with-command",
			"--redis URL", "--ttl DURATION", "--grace DURATION", "Examples:", "  locksmith elect ", "LOCKSMITH_FENCE"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("locksmith %q: %q missing from\n%s", args, want, stdout)
			}
		}
	}
	if _, stdout, _ := locksmith(t, nil, "help"); !strings.Contains(stdout, "locksmith elect ") {
		t.Errorf("the overview does not list elect:\n%s", stdout)
	}
}
