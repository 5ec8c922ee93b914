//go:build unix

package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	library "github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/keyslot"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// run --key A --key B holds both keys with one token while COMMAND runs,
// gives COMMAND the set in its environment, and releases both; a run on
// one of the keys meanwhile finds it held.
func TestRunSetHeld(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	// Given out of order: the set is named sorted.
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", b, "--key", a, "--"},
		script(dir, `echo "$LOCKSMITH_KEY" > "$1/key"; echo "$LOCKSMITH_KEYS" > "$1/keys"; echo "$LOCKSMITH_TOKEN" > "$1/token"
			while [ ! -e "$1/proceed" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
		"the command did not start")
	token := strings.TrimSpace(readFile(t, dir+"/token"))
	for _, k := range []string{a, b} {
		if got, err := client.Get(t.Context(), "locksmith:"+k).Result(); err != nil || got != token {
			t.Errorf("GET %s = %q, %v; want LOCKSMITH_TOKEN %q", k, got, err, token)
		}
	}
	want := a + " " + b
	for _, name := range []string{"key", "keys"} {
		if got := strings.TrimSpace(readFile(t, dir+"/"+name)); got != want {
			t.Errorf("LOCKSMITH_%s = %q, want %q", strings.ToUpper(name), got, want)
		}
	}

	code, _, stderr := locksmith(t, nil, "run", "--redis", url, "--key", b, "--", "touch", dir+"/other-ran")
	if code != 75 || exists(dir+"/other-ran") {
		t.Errorf("run --key %s while the set is held: exit %d (stderr %q), want 75 and nothing run", b, code, stderr)
	}

	// status on either key shows the same holder: one mark, the set's.
	for _, k := range []string{a, b} {
		code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", k)
		if code != 0 || !strings.Contains(stdout, "token #"+mark(token)) {
			t.Errorf("status --key %s: exit %d, stdout %q; want token #%s", k, code, stdout, mark(token))
		}
	}

	touch(t, dir+"/proceed")
	p.expect(t, 0)
	if n := client.Exists(t.Context(), "locksmith:"+a, "locksmith:"+b).Val(); n != 0 {
		t.Errorf("%d keys of the set are still there after locksmith exited", n)
	}
}

// While run --key holds a set of three keys, status on any of them says
// that it is held as part of a set of 3 keys, by the set's mark, and ls
// marks the three with that mark, among a lock held alone, an election
// and a lock whose token only looks like a set's, which show no set.
func TestStatusAndLsShowSet(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	prefix := fmt.Sprintf("settest%d:", time.Now().UnixNano())
	locker := library.New(client, library.WithPrefix(prefix), library.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	alone, err := locker.Obtain(ctx, "b-alone")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alone.Release(ctx) })
	term, err := locker.Election("e-election").Campaign(ctx, "db1/3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = term.Resign(ctx) })
	if err := client.Set(ctx, prefix+"f-by-hand", "x/3", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	notSets := []string{"b-alone", "e-election", "f-by-hand"}

	set, dir := []string{"a-set", "c-set", "d-set"}, t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--prefix", prefix,
		"--key", set[2], "--key", set[0], "--key", set[1], "--ttl", "30s", "--"},
		script(dir, `echo "$LOCKSMITH_TOKEN" > "$1/token"; while [ ! -e "$1/proceed" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
		"the command did not start")
	token := strings.TrimSpace(readFile(t, dir+"/token"))

	status := func(key string, flags ...string) string {
		t.Helper()
		args := append([]string{"status", "--redis", url, "--prefix", prefix, "--key", key}, flags...)
		code, stdout, stderr := locksmith(t, nil, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		return stdout
	}
	statusJSON := func(key string) statusJSON {
		t.Helper()
		out := status(key, "--json")
		var st statusJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json --key %s printed %q: %v", key, out, err)
		}
		return st
	}
	for _, key := range set {
		if st := statusJSON(key); !st.Held || st.Token != "" || st.Mark != mark(token) || st.SetSize != 3 {
			t.Errorf("status --json --key %s: %+v, want held by the set's mark %s, no token, set_size 3", key, st, mark(token))
		}
		want := "is held by token #" + mark(token) + " as part of a set of 3 keys, "
		if out := status(key); !strings.Contains(out, want) || strings.Contains(out, token) {
			t.Errorf("status --key %s printed %q, want %q and no token", key, out, want)
		}
		want = "is held by token " + strconv.Quote(token) + " as part of a set of 3 keys, "
		if out := status(key, "--show-token"); !strings.Contains(out, want) {
			t.Errorf("status --show-token --key %s printed %q, want %q", key, out, want)
		}
	}
	for _, key := range notSets {
		if st := statusJSON(key); !st.Held || st.SetSize != 0 {
			t.Errorf("status --json --key %s: %+v, want held, and no set_size", key, st)
		}
		if out := status(key); strings.Contains(out, "part of a set") {
			t.Errorf("status --key %s printed %q, want no set", key, out)
		}
	}

	out, all := lsJSON(t, url, "--prefix", prefix)
	if len(out.Locks) != 6 {
		t.Fatalf("ls --json listed %+v, want the 6 keys", out.Locks)
	}
	for _, l := range out.Locks {
		want, wantMark := 0, ""
		if slices.Contains(set, l.Key) {
			want, wantMark = 3, mark(token)
		}
		if l.SetSize != want || l.Mark != wantMark {
			t.Errorf("ls --json: %s has set_size %d, token_mark %q; want %d, %q", l.Key, l.SetSize, l.Mark, want, wantMark)
		}
	}
	code, table, stderr := locksmith(t, nil, "ls", "--redis", url, "--prefix", prefix)
	rows := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if code != 0 || len(rows) != 7 {
		t.Fatalf("ls: exit %d, stderr %q, stdout\n%s\nwant 0, a header and 6 rows", code, stderr, table)
	}
	for _, row := range rows[1:] {
		key, _, _ := strings.Cut(row, " ")
		if inSet := strings.Contains(row, "#"+mark(token)+" (set of 3)"); inSet != slices.Contains(set, key) || (!inSet && strings.Contains(row, "set of")) {
			t.Errorf("ls: row %q; want the set's mark on the rows of %q only", row, set)
		}
	}
	if all += table; strings.Contains(all, token) {
		t.Errorf("ls printed the set's token %q:\n%s", token, all)
	}

	touch(t, dir+"/proceed")
	p.expect(t, 0)
	if st := statusJSON(set[0]); st.Held || st.SetSize != 0 || st.Mark != "" {
		t.Errorf("status --json --key %s after the run: %+v, want free and no set", set[0], st)
	}
	if out, _ := lsJSON(t, url, "--prefix", prefix); len(out.Locks) != len(notSets) {
		t.Errorf("ls --json after the run listed %+v, want only %q", out.Locks, notSets)
	}
}

// All or nothing: with one key held elsewhere, nothing runs and the other
// key is not taken.
func TestRunSetHeldElsewhere(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	if err := client.Set(t.Context(), "locksmith:"+b, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  int
	}{
		{nil, 75},
		{[]string{"--skip-ok"}, 0},
		{[]string{"--wait", "300ms"}, 75},
	} {
		args := append(append([]string{"run", "--redis", url, "--key", a, "--key", b}, tc.flags...), "--", "touch", dir+"/ran")
		code, stdout, stderr := locksmith(t, nil, args...)
		if code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.flags, code, tc.want, stderr)
		}
		if stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "held elsewhere") ||
			!strings.Contains(stderr, strconv.Quote(a)+", "+strconv.Quote(b)) {
			t.Errorf("%q: stdout %q, stderr %q; want one line naming the set held elsewhere", tc.flags, stdout, stderr)
		}
		if err := client.Get(t.Context(), "locksmith:"+a).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("%q: GET %s: %v, want the free key left untaken", tc.flags, a, err)
		}
	}
	if exists(dir + "/ran") {
		t.Error("the command ran while part of the set was held elsewhere")
	}
	if got := client.Get(t.Context(), "locksmith:"+b).Val(); got != "someone-else" {
		t.Errorf("the other holder's lock was changed to %q", got)
	}
}

// --wait waits for the whole set: it runs once the key held elsewhere
// expires.
func TestRunSetWait(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	if err := client.Set(t.Context(), "locksmith:"+b, "crashed", 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	code, _, stderr := locksmith(t, nil, "run", "--redis", url, "--key", a, "--key", b, "--wait", "60s", "--", "touch", dir+"/ran")
	if code != 0 || !exists(dir+"/ran") {
		t.Errorf("exit %d (stderr %q), want 0 and the command run once the held key expired", code, stderr)
	}
	if waited := time.Since(started); waited < time.Second {
		t.Errorf("ran after %v, before the held key expired", waited)
	}
}

// A set is lost when any of its keys is: deleting one stops COMMAND with
// SIGTERM, and locksmith exits 79, naming the set; the other key is
// released.
func TestRunSetLost(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", a, "--key", b, "--ttl", "2s", "--"},
		script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
			touch "$1/started"
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	if err := client.Del(t.Context(), "locksmith:"+b).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
	p.expect(t, 79)
	if errOut := p.errOut(t); !strings.Contains(errOut, "lost set of locks "+strconv.Quote(a)+", "+strconv.Quote(b)) ||
		!strings.Contains(errOut, "SIGTERM") {
		t.Errorf("stderr %q does not say the set was lost", errOut)
	}
	if n := client.Exists(t.Context(), "locksmith:"+a, "locksmith:"+b).Val(); n != 0 {
		t.Errorf("%d keys of the lost set are still there", n)
	}
}

// With --fencing, COMMAND gets the highest fence of the set and each
// key's own, and the JSON log names the set.
func TestRunSetFencing(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	// b's counter is far ahead of the clock the counters follow: the
	// fences differ.
	if err := client.Set(t.Context(), keyslot.Companion("locksmith:", b, keyslot.Fence), int64(1)<<60, 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := locksmith(t, nil, append([]string{"run", "--redis", url, "--key", a, "--key", b, "--fencing", "--log-format", "json", "--"},
		script(dir, `echo "$LOCKSMITH_FENCE" > "$1/fence"; echo "$LOCKSMITH_FENCES" > "$1/fences"`)...)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	counter := func(k string) int64 {
		n, err := client.Get(t.Context(), keyslot.Companion("locksmith:", k, keyslot.Fence)).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fa, fb := counter(a), counter(b)
	if fa >= fb {
		t.Fatalf("fence counters %d, %d: want %s's below %s's", fa, fb, a, b)
	}
	if got, want := strings.TrimSpace(readFile(t, dir+"/fence")), strconv.FormatInt(fb, 10); got != want {
		t.Errorf("LOCKSMITH_FENCE = %q, want %q, the highest", got, want)
	}
	if got, want := strings.TrimSpace(readFile(t, dir+"/fences")), a+"="+strconv.FormatInt(fa, 10)+" "+b+"="+strconv.FormatInt(fb, 10); got != want {
		t.Errorf("LOCKSMITH_FENCES = %q, want %q", got, want)
	}
	var acquired bool
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec struct {
			Msg    string           `json:"msg"`
			Key    *string          `json:"key"`
			Keys   []string         `json:"keys"`
			Fence  int64            `json:"fence"`
			Fences map[string]int64 `json:"fences"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line %q: %v", line, err)
		}
		if rec.Key != nil || strings.Join(rec.Keys, " ") != a+" "+b {
			t.Errorf("record %q: want keys [%s %s] and no key", line, a, b)
		}
		if rec.Msg == "acquired" {
			acquired = true
			if rec.Fence != fb || rec.Fences[a] != fa || rec.Fences[b] != fb {
				t.Errorf("acquired record %q: want fence %d and fences %s=%d, %s=%d", line, fb, a, fa, b, fb)
			}
		}
	}
	if !acquired {
		t.Errorf("no acquired record in %q", stderr)
	}
}

// What cannot work with several keys is refused before anything is taken,
// and the commands that take one key refuse a second.
func TestSetUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := dir + "/ran"
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"run", "--key", "a", "--key", "b", "--once", "--", "touch", marker}, "--once"},
		{[]string{"run", "--key", "a", "--key", "b", "--limit", "2", "--", "touch", marker}, "--limit"},
		{[]string{"run", "--key", "a", "--key", "a", "--", "touch", marker}, `--key "a" given twice`},
		{[]string{"run", "--key", "a", "--key", "", "--", "touch", marker}, "--key 2 of 2 is empty"},
		{[]string{"run", "--key", "a", "--key", "b c", "--", "touch", marker}, "white space"},
		{[]string{"status", "--key", "a", "--key", "b"}, "--key given 2 times: this command takes one key"},
		{[]string{"release", "--key", "a", "--key", "b", "--force"}, "--key given 2 times: this command takes one key"},
		{[]string{"status", "--key", "a", "--key", "b", "--watch"}, "--key given 2 times"},
	} {
		code, _, stderr := locksmith(t, nil, tc.args...)
		if code != 64 || !strings.Contains(stderr, tc.want) {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 64 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if exists(marker) {
		t.Error("a command ran despite a usage error")
	}
}

// The help of run tells of sets.
func TestHelpSet(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := locksmith(t, nil, "help", "run")
	if code != 0 || stderr != "" {
		t.Fatalf("help run: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"--key KEY --key KEY...", "LOCKSMITH_KEYS", "LOCKSMITH_FENCES", "given more than once"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help run: %q missing from\n%s", want, stdout)
		}
	}
}

// On Redis Cluster a set may lie in several hash slots: keys in
// different slots are taken together, one slot after the other, and so
// are keys with a common hash tag, in one step; both are released when
// COMMAND ends.
func TestClusterRunSet(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	url := "redis://" + cluster.Nodes[0].Addr + "?addr=" + cluster.Nodes[1].Addr
	keys, _ := clusterKeys(t, cluster, 2)
	tag := "{" + uniqueKey(t) + "}"
	for _, set := range [][]string{keys, {tag + ":a", tag + ":b"}} {
		dir := t.TempDir()
		code, _, stderr := locksmith(t, nil, "run", "--cluster", "--redis", url, "--key", set[0], "--key", set[1], "--",
			"sh", "-c", `echo "$LOCKSMITH_KEYS" > "$1/ran"`, "sh", dir)
		if code != 0 || !exists(dir+"/ran") {
			t.Errorf("set %q: exit %d, stderr %q; want 0 and the command run", set, code, stderr)
		}
		c := cluster.Client(t)
		if n := c.Exists(t.Context(), "locksmith:"+set[0]).Val() + c.Exists(t.Context(), "locksmith:"+set[1]).Val(); n != 0 {
			t.Errorf("set %q: %d keys left after the command ended", set, n)
		}
	}
}

// --max-hold caps a set as it caps a lock: SIGTERM at the cap, exit 79,
// and both keys released at once.
func TestRunSetMaxHold(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	a, b, dir := uniqueKey(t)+":a", uniqueKey(t)+":b", t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", a, "--key", b, "--ttl", "30s", "--max-hold", "1s", "--"},
		script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
	p.expect(t, 79)
	if n := client.Exists(t.Context(), "locksmith:"+a, "locksmith:"+b).Val(); n != 0 {
		t.Errorf("%d keys of the capped set were left to their TTL of 30s", n)
	}
}
