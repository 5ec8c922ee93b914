//go:build unix

package main_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	library "github.com/locksmith-go/locksmith"
)

// completion returns the record of a run --once under key that succeeded,
// read through the library, or nil.
func completion(t *testing.T, client *redis.Client, key string) *library.Completion {
	t.Helper()
	c, ok, err := library.New(client, library.WithPrefix("locksmith:")).Completed(t.Context(), key)
	if err != nil {
		t.Fatalf("Done(%q): %v", key, err)
	}
	if !ok {
		return nil
	}
	return &c
}

// lines returns the lines of the file name.
func lines(t *testing.T, name string) []string {
	t.Helper()
	return strings.Fields(readFile(t, name))
}

// Five hosts' schedulers fire the same job half a second apart, over two
// seconds; the job takes a second. It runs once: the hosts that fire while
// it runs find the lock held, and those that fire after it succeeded find
// the record. With --wait, those that fire while it runs wait for the lock
// and then find the record.
func TestRunOnceStaggered(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	const hosts, stagger = 5, 500 * time.Millisecond
	for _, flags := range [][]string{nil, {"--wait", "30s"}} {
		t.Run(strings.Join(append([]string{"once"}, flags...), " "), func(t *testing.T) {
			t.Parallel()
			key, dir := uniqueKey(t), t.TempDir()
			args := append([]string{"run", "--once", "--redis", url, "--key", key, "--ttl", "2s"}, flags...)
			args = append(append(args, "--"), script(dir, `echo "$LOCKSMITH_TOKEN" >> "$1/runs"; sleep 1`)...)
			begin := time.Now()
			var procs []*proc
			for i := range hosts {
				time.Sleep(time.Until(begin.Add(time.Duration(i) * stagger)))
				if i == hosts-1 {
					// The last host fires after the job succeeded, even
					// on a machine too busy to finish it in two seconds.
					eventually(t, 20*time.Second, func() bool { return completion(t, client, key) != nil },
						"the job's success was not recorded")
				}
				procs = append(procs, start(t, nil, args...))
			}
			ran, codes := 0, make([]int, hosts)
			for i, p := range procs {
				code := p.wait(t, 30*time.Second)
				codes[i] = code
				switch {
				case code == 0:
					ran++
				case code == 75 && flags == nil:
					// Fired while the job ran.
				case code == 80:
					if stderr := p.errOut(t); strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "already succeeded") {
						t.Errorf("host %d: stderr %q, want one line saying the job already succeeded", i+1, stderr)
					}
				default:
					t.Errorf("host %d: exit %d; stderr %q", i+1, code, p.errOut(t))
				}
			}
			t.Logf("exit statuses: %v", codes)
			if runs := lines(t, dir+"/runs"); len(runs) != 1 || ran != 1 {
				t.Fatalf("the job ran %d times (%q), and %d locksmiths exited 0; want once", len(runs), runs, ran)
			}
			if code := procs[hosts-1].code; code != 80 {
				t.Errorf("the last host, firing after the success, exited %d, want 80 (already succeeded)", code)
			}
			c := completion(t, client, key)
			if c == nil || c.Token != lines(t, dir+"/runs")[0] {
				t.Errorf("record %+v, want one naming the run's token", c)
			}
		})
	}
}

// A job that fails runs again next time, and once it has succeeded, never
// again (until its record expires).
func TestRunOnceFailedJobRunsAgain(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	run := func(flags ...string) (int, string, string) {
		t.Helper()
		args := append([]string{"run", "--once", "--redis", url, "--key", key}, flags...)
		return locksmith(t, nil, append(append(args, "--"), script(dir, `echo run >> "$1/runs"
			if [ ! -e "$1/failed" ]; then touch "$1/failed"; exit 3; fi`)...)...)
	}

	if code, _, stderr := run(); code != 3 {
		t.Fatalf("first run: exit %d, want the command's 3; stderr %q", code, stderr)
	}
	if c := completion(t, client, key); c != nil {
		t.Fatalf("a failed run was recorded: %+v", c)
	}
	if code, _, stderr := run("--done-ttl", "1h"); code != 0 {
		t.Fatalf("second run: exit %d, want 0; stderr %q", code, stderr)
	}
	if completion(t, client, key) == nil {
		t.Fatal("the success was not recorded")
	}
	// The record lives beside the lock, for --done-ttl.
	st, err := library.New(client, library.WithPrefix("locksmith:")).Inspect(t.Context(), key)
	if err != nil || st.Held || st.Done == nil {
		t.Fatalf("Inspect: %+v, %v; want a free lock and a record", st, err)
	}
	for _, tc := range []struct {
		flags []string
		want  int
	}{{nil, 80}, {[]string{"--skip-ok"}, 0}, {[]string{"--wait", "10s"}, 80}} {
		code, stdout, stderr := run(tc.flags...)
		if code != tc.want || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "already succeeded") {
			t.Errorf("run --once %q after a success: exit %d, stdout %q, stderr %q; want %d and one line saying so",
				tc.flags, code, stdout, stderr, tc.want)
		}
	}
	if runs := lines(t, dir+"/runs"); len(runs) != 2 {
		t.Errorf("the job ran %d times, want 2 (a failure, then a success)", len(runs))
	}
}

// A job whose lock is lost while it runs is stopped as without --once, and
// not recorded, so the next run --once runs it again.
func TestRunOnceLockLost(t *testing.T) {
	t.Parallel()
	url, client := shared(t)

	t.Run("while running", func(t *testing.T) {
		t.Parallel()
		key, dir := uniqueKey(t), t.TempDir()
		p := start(t, nil, append([]string{"run", "--once", "--redis", url, "--key", key, "--ttl", "1s", "--"},
			script(dir, `trap 'echo TERM > "$1/got-term"; exit 0' TERM
				touch "$1/started"
				while :; do sleep 0.05; done`)...)...)
		eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
		if err := client.Del(t.Context(), "locksmith:"+key).Err(); err != nil {
			t.Fatal(err)
		}
		// The command exits 0 on SIGTERM: that is no success.
		p.expect(t, 79)
		if !exists(dir + "/got-term") {
			t.Error("the command got no SIGTERM")
		}
		if c := completion(t, client, key); c != nil {
			t.Fatalf("a run that lost its lock was recorded: %+v", c)
		}
		code, _, stderr := locksmith(t, nil, "run", "--once", "--redis", url, "--key", key, "--", "touch", dir+"/ran-again")
		if code != 0 || !exists(dir+"/ran-again") {
			t.Errorf("the next run --once: exit %d (stderr %q), want 0 and the command run", code, stderr)
		}
	})

	t.Run("found at the end", func(t *testing.T) {
		t.Parallel()
		// A long TTL: no renewal notices; the completion does.
		key, dir := uniqueKey(t), t.TempDir()
		rkey := "locksmith:" + key
		p := start(t, nil, append([]string{"run", "--once", "--redis", url, "--key", key, "--ttl", "60s", "--"},
			script(dir, `touch "$1/started"; while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
		eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
		if err := client.Set(t.Context(), rkey, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		touch(t, dir+"/finish")
		p.expect(t, 79)
		if errOut := p.errOut(t); !strings.Contains(errOut, "expired or was taken") || !strings.Contains(errOut, "not recorded") {
			t.Errorf("stderr %q does not say the lock was lost and nothing recorded", errOut)
		}
		if c := completion(t, client, key); c != nil {
			t.Errorf("a run that lost its lock was recorded: %+v", c)
		}
		if got := client.Get(context.WithoutCancel(t.Context()), rkey).Val(); got != "someone-else" {
			t.Errorf("the new holder's lock was changed to %q", got)
		}
	})
}

// run --fencing gives each run a larger LOCKSMITH_FENCE than the last, and
// status shows the last one; without --fencing there is none.
func TestRunFencing(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	src := `echo "${LOCKSMITH_FENCE-unset}" >> "$1/fences"`
	var last int64
	for i := range 4 {
		code, _, stderr := locksmith(t, nil, append([]string{"run", "--fencing", "--redis", url, "--key", key, "--"},
			script(dir, src)...)...)
		if code != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", i+1, code, stderr)
		}
		fences := lines(t, dir+"/fences")
		fence, err := strconv.ParseInt(fences[len(fences)-1], 10, 64)
		if err != nil || fence <= last {
			t.Fatalf("run %d: LOCKSMITH_FENCE %q, want a decimal integer above the last one, %d", i+1, fences[len(fences)-1], last)
		}
		last = fence
	}
	if st := status(t, url, key); st.Held || st.Fence != last {
		t.Errorf("status --json: %+v, want a free lock with fence %d", st, last)
	}
	code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", key)
	if want := fmt.Sprintf("last fencing token: %d\n", last); code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("status: exit %d, stdout %q; want %q", code, stdout, want)
	}

	// Without --fencing: no fence, and the counter keeps its value.
	if code, _, stderr := locksmith(t, nil, append([]string{"run", "--redis", url, "--key", key, "--"}, script(dir, src)...)...); code != 0 {
		t.Fatalf("run without --fencing: exit %d, stderr %q", code, stderr)
	}
	if fences := lines(t, dir+"/fences"); fences[len(fences)-1] != "unset" {
		t.Errorf("without --fencing, LOCKSMITH_FENCE = %q, want it unset", fences[len(fences)-1])
	}
	if st := status(t, url, key); st.Fence != last {
		t.Errorf("status --json after a run without --fencing: fence %d, want %d", st.Fence, last)
	}
}

// run --fencing --fence-ttl: the fence counter expires that long after
// the last token was taken; without --fence-ttl it never expires.
func TestRunFenceTTL(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		flags []string
		// want is the counter's TTL: at most this, and more than half
		// of it; zero for no expiry
		want time.Duration
	}{
		{"fence-ttl", []string{"--fencing", "--fence-ttl", "1h"}, time.Hour},
		{"none", []string{"--fencing"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			args := append(append([]string{"run", "--redis", url, "--key", key}, tc.flags...), "--", "true")
			if code, _, stderr := locksmith(t, nil, args...); code != 0 {
				t.Fatalf("run: exit %d, stderr %q", code, stderr)
			}
			keys, err := library.New(client).Keys(key, library.WithPrefix("locksmith:"))
			if err != nil {
				t.Fatal(err)
			}
			ttl, err := client.PTTL(ctx, keys.Fence).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ttl == -2:
				t.Fatalf("no fence counter at %q", keys.Fence)
			case tc.want == 0 && ttl != -1:
				t.Errorf("fence counter TTL %v, want none", ttl)
			case tc.want != 0 && (ttl <= tc.want/2 || ttl > tc.want):
				t.Errorf("fence counter TTL %v, want about %v", ttl, tc.want)
			}
		})
	}
}

// run --once --fencing: the command gets its fence, and once it has
// succeeded, status shows the fence and the record: when, by which
// locksmith, under which token.
func TestStatusOfOnceJob(t *testing.T) {
	t.Parallel()
	url, _ := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	before := time.Now()
	p := start(t, nil, append([]string{"run", "--once", "--fencing", "--redis", url, "--key", key, "--"},
		script(dir, `echo "$LOCKSMITH_FENCE" > "$1/fence"; echo "$LOCKSMITH_TOKEN" > "$1/token"
			while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
		"the command did not start")
	fence, err := strconv.ParseInt(strings.TrimSpace(readFile(t, dir+"/fence")), 10, 64)
	if err != nil || fence <= 0 {
		t.Fatalf("LOCKSMITH_FENCE %q, want a positive decimal integer", readFile(t, dir+"/fence"))
	}
	token := strings.TrimSpace(readFile(t, dir+"/token"))
	if st := status(t, url, key); !st.Held || st.Mark != mark(token) || st.Fence != fence || st.Done != nil {
		t.Errorf("status --json while the job runs: %+v, want held by %q, fence %d, no record", st, token, fence)
	}
	touch(t, dir+"/finish")
	p.expect(t, 0)

	host, _ := os.Hostname()
	by := fmt.Sprintf("%s:%d", host, p.cmd.Process.Pid)
	st := status(t, url, key)
	if st.Held || st.Fence != fence || st.Done == nil || st.Done.Mark != mark(token) || st.Done.Token != "" || st.Done.By != by ||
		st.Done.CompletedAt.Before(before.Truncate(time.Second)) || st.Done.CompletedAt.After(time.Now()) {
		t.Fatalf("status --json after the job: %+v (done %+v); want free, fence %d, done by %s under %q",
			st, st.Done, fence, by, token)
	}
	code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", key)
	for _, want := range []string{
		"is free\n",
		fmt.Sprintf("last fencing token: %d\n", fence),
		"succeeded at " + st.Done.CompletedAt.Format(time.RFC3339),
		"by " + by,
		"under token #" + mark(token),
	} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("status: exit %d, stdout %q; want %q in it", code, stdout, want)
		}
	}
	if strings.Contains(stdout, token) {
		t.Errorf("status printed the token of the record: %q", stdout)
	}
	code, stdout, _ = locksmith(t, nil, "status", "--redis", url, "--key", key, "--show-token")
	if want := fmt.Sprintf("under token %q", token); code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("status --show-token: exit %d, stdout %q; want %q in it", code, stdout, want)
	}
}
