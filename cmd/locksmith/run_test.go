//go:build unix

package main_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		want    int
	}{
		{"success", []string{"true"}, 0},
		{"own status", []string{"sh", "-c", "exit 7"}, 7},
		{"killed by SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"killed by SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{"not found", []string{"no-such-command-for-locksmith"}, 127},
		{"not executable", []string{notExecutable}, 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--"}, tc.command...)...)
			p.expect(t, tc.want)
			if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 0 {
				t.Errorf("the lock is still there after locksmith exited")
			}
		})
	}
}

func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	// A database and a prefix of their own show that both are used.
	srv := redistest.Shared(t)
	opts := srv.Options()
	opts.DB = 3
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	key := uniqueKey(t)
	rkey := "custom:" + key
	dir := t.TempDir()

	p := start(t, nil, append([]string{"run", "--redis", redisURL(srv, 3), "--prefix", "custom:", "--key", key, "--"},
		script(dir, `echo "$LOCKSMITH_KEY" > "$1/key"; echo "$LOCKSMITH_TOKEN" > "$1/token"
			while [ ! -e "$1/proceed" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/token"), "\n") },
		"the command did not start")
	token := strings.TrimSpace(readFile(t, dir+"/token"))
	if got := strings.TrimSpace(readFile(t, dir+"/key")); got != key {
		t.Errorf("LOCKSMITH_KEY = %q, want %q", got, key)
	}
	if got, err := client.Get(t.Context(), rkey).Result(); err != nil || got != token {
		t.Errorf("GET %s in db 3 = %q, %v; want LOCKSMITH_TOKEN %q", rkey, got, err, token)
	}
	if ttl := client.PTTL(t.Context(), rkey).Val(); ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("PTTL = %v, want the default TTL of 30s or a little less", ttl)
	}
	touch(t, dir+"/proceed")
	p.expect(t, 0)
	if n := client.Exists(t.Context(), rkey).Val(); n != 0 {
		t.Errorf("the lock was not released")
	}
}

func TestRunHeldElsewhere(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	if err := client.Set(t.Context(), "locksmith:"+key, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		flags []string
		want  int
	}{
		{nil, 75},
		{[]string{"--skip-ok"}, 0},
		{[]string{"--wait", "300ms"}, 75},
		{[]string{"--once"}, 75},
		{[]string{"--once", "--skip-ok"}, 0},
	} {
		args := append(append([]string{"run", "--redis", url, "--key", key}, tc.flags...), "--", "touch", dir+"/ran")
		code, stdout, stderr := locksmith(t, nil, args...)
		if code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.flags, code, tc.want, stderr)
		}
		if stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "held elsewhere") {
			t.Errorf("%q: stdout %q, stderr %q; want one line saying the lock is held elsewhere", tc.flags, stdout, stderr)
		}
	}
	if exists(dir + "/ran") {
		t.Error("the command ran while the lock was held elsewhere")
	}
	if got := client.Get(t.Context(), "locksmith:"+key).Val(); got != "someone-else" {
		t.Errorf("the other holder's lock was changed to %q", got)
	}
}

func TestRunRedisDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var procs []*proc
	// --wait shorter than go-redis takes to give up on a connection.
	for _, flags := range [][]string{nil, {"--skip-ok"}, {"--wait", "100ms"}} {
		procs = append(procs, start(t, nil, append(append([]string{"run", "--redis", "redis://" + closedPort(t), "--key", "k"}, flags...),
			"--", "touch", dir+"/ran")...))
	}
	for _, p := range procs {
		code, stderr := p.wait(t, 30*time.Second), p.errOut(t)
		if code != 69 || !strings.Contains(stderr, "connection refused") || strings.Contains(stderr, "held") {
			t.Errorf("%q: exit %d, stderr %q; want 69 and a connection error, not held elsewhere", p.cmd.Args[1:], code, stderr)
		}
	}
	if exists(dir + "/ran") {
		t.Error("the command ran without the lock")
	}
}

// Three locksmiths started together on one key never run their commands
// at the same time: each command creates a marker file with O_EXCL (the
// shell's noclobber) and would find it there if another were running.
func TestRunExclusive(t *testing.T) {
	t.Parallel()
	const racers = 3
	const src = `set -C
		if ! : > "$1/running" 2>/dev/null; then echo overlap >> "$1/overlap"; exit 3; fi
		echo "$LOCKSMITH_TOKEN" >> "$1/runs"
		sleep 0.3
		rm "$1/running"`
	url, _ := shared(t)

	t.Run("wait", func(t *testing.T) {
		t.Parallel()
		key, dir := uniqueKey(t), t.TempDir()
		var procs []*proc
		for range racers {
			procs = append(procs, start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--wait", "60s", "--"},
				script(dir, src)...)...))
		}
		for _, p := range procs {
			p.expect(t, 0)
		}
		if exists(dir + "/overlap") {
			t.Fatal("two commands ran at the same time")
		}
		runs := strings.Fields(readFile(t, dir+"/runs"))
		if slices.Sort(runs); len(slices.Compact(runs)) != racers {
			t.Errorf("runs: %q, want %d distinct tokens", runs, racers)
		}
	})

	t.Run("try once", func(t *testing.T) {
		t.Parallel()
		key, dir := uniqueKey(t), t.TempDir()
		var procs []*proc
		for range racers {
			procs = append(procs, start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--"},
				script(dir, src)...)...))
		}
		ran := 0
		for _, p := range procs {
			switch code := p.wait(t, 30*time.Second); code {
			case 0:
				ran++
			case 75:
			default:
				t.Errorf("exit %d, want 0 (ran) or 75 (held elsewhere); stderr %q", code, p.errOut(t))
			}
		}
		if exists(dir + "/overlap") {
			t.Fatal("two commands ran at the same time")
		}
		// Most often one runs; a racer that starts late may run after it.
		if runs := len(strings.Fields(readFile(t, dir+"/runs"))); runs != ran || ran == 0 {
			t.Errorf("%d commands ran and %d locksmiths exited 0; want the same, at least 1", runs, ran)
		}
	})
}

func TestRunWait(t *testing.T) {
	t.Parallel()
	url, client := shared(t)

	t.Run("holder exits", func(t *testing.T) {
		t.Parallel()
		key, dir := uniqueKey(t), t.TempDir()
		holder := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--"},
			script(dir, `touch "$1/holding"; while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
		eventually(t, 20*time.Second, func() bool { return exists(dir + "/holding") }, "the holder did not start")
		waiter := start(t, nil, "run", "--redis", url, "--key", key, "--wait", "60s", "--", "touch", dir+"/waiter-ran")
		time.Sleep(time.Second)
		if exists(dir+"/waiter-ran") || waiter.exited() {
			t.Fatalf("the waiter did not wait for the holder; stderr %q", waiter.errOut(t))
		}
		// status shows it queued for the lock, once it has queued: on a
		// busy machine that may take longer than the second above.
		var st statusJSON
		eventually(t, 20*time.Second, func() bool {
			st = status(t, url, key)
			return st.Held && st.Queued == 1
		}, "status --json while one process waits: %+v, want held, queued 1", &st)
		if code, stdout, _ := locksmith(t, nil, "status", "--redis", url, "--key", key); code != 0 ||
			!strings.Contains(stdout, "\n1 waiter queued for it") {
			t.Errorf("status: exit %d, stdout %q; want the waiter counted", code, stdout)
		}
		touch(t, dir+"/finish")
		holder.expect(t, 0)
		released := time.Now()
		waiter.expect(t, 0)
		t.Logf("the waiter ran %v after the holder exited", time.Since(released))
		if !exists(dir + "/waiter-ran") {
			t.Error("the waiter did not run its command")
		}
	})

	t.Run("holder crashed", func(t *testing.T) {
		t.Parallel()
		// A holder that died without releasing leaves its lock to expire.
		key, dir := uniqueKey(t), t.TempDir()
		if err := client.Set(t.Context(), "locksmith:"+key, "crashed", 1500*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := locksmith(t, nil, "run", "--redis", url, "--key", key, "--wait", "60s", "--", "touch", dir+"/ran")
		if code != 0 || !exists(dir+"/ran") {
			t.Errorf("exit %d (stderr %q), want 0 and the command run once the lock expired", code, stderr)
		}
	})
}

// Deleting the lock from outside, here with release --force, stops the
// command: its whole process group gets SIGTERM at the next renewal.
func TestRunLockDeleted(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "3s", "--"},
		script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
			sleep 1000 & echo $! > "$1/background"
			touch "$1/started"
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	background := readPid(t, dir+"/background")
	killAtEnd(t, background)

	deleted := time.Now()
	code, stdout, stderr := locksmith(t, nil, "release", "--redis", url, "--key", key, "--force")
	if code != 0 || !strings.Contains(stdout, "deleted") {
		t.Fatalf("release --force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	eventually(t, 10*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
	t.Logf("SIGTERM came %v after the lock was deleted (renewal every 1s)", time.Since(deleted))
	p.expect(t, 79)
	if errOut := p.errOut(t); !strings.Contains(errOut, "lost lock") || !strings.Contains(errOut, "SIGTERM") {
		t.Errorf("stderr %q does not say the lock was lost", errOut)
	}
	// The process group got the signal: the background sleep too.
	eventually(t, 10*time.Second, func() bool { return !alive(background) }, "a background process survived")
	if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 0 {
		t.Error("the lock is there again")
	}
}

// A command that ignores SIGTERM gets SIGKILL after --grace.
func TestRunLockLostGrace(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "2s", "--grace", "1s", "--"},
		script(dir, `trap 'echo TERM >> "$1/got-term"' TERM
			echo $$ > "$1/pid"
			while :; do sleep 0.05; done`)...)...)
	pid := readPid(t, dir+"/pid")
	killAtEnd(t, pid)
	if err := client.Del(t.Context(), "locksmith:"+key).Err(); err != nil {
		t.Fatal(err)
	}
	p.expect(t, 79)
	if !exists(dir + "/got-term") {
		t.Error("the command got no SIGTERM before SIGKILL")
	}
	if errOut := p.errOut(t); !strings.Contains(errOut, "SIGKILL") {
		t.Errorf("stderr %q does not mention SIGKILL", errOut)
	}
	if alive(pid) {
		t.Error("the command is still running")
	}
}

// Whatever is left of the command's process group when the command has
// exited after losing the lock gets SIGKILL after --grace: nothing runs on
// without the lock.
func TestRunLockLostKillsStragglers(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "2s", "--grace", "1s", "--"},
		script(dir, `(trap '' TERM; exec sleep 1000) & echo $! > "$1/straggler"
			trap 'exit 143' TERM
			while :; do sleep 0.05; done`)...)...)
	straggler := readPid(t, dir+"/straggler")
	killAtEnd(t, straggler)
	if err := client.Del(t.Context(), "locksmith:"+key).Err(); err != nil {
		t.Fatal(err)
	}
	p.expect(t, 79)
	eventually(t, 5*time.Second, func() bool { return !alive(straggler) }, "a process that ignores SIGTERM outlived locksmith")
	if errOut := p.errOut(t); !strings.Contains(errOut, "SIGKILL") {
		t.Errorf("stderr %q does not mention SIGKILL", errOut)
	}
}

// When Redis goes away, the lock cannot be renewed: the command is stopped
// when the lock's validity runs out, before another holder can take it.
func TestRunRedisDies(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", redisURL(srv, 0), "--key", key, "--ttl", "1500ms", "--"},
		script(dir, `trap 'echo TERM > "$1/got-term"; exit 143' TERM
			touch "$1/started"
			while :; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	srv.Kill()
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/got-term") }, "the command got no SIGTERM")
	p.expect(t, 79)
	if errOut := p.errOut(t); !strings.Contains(errOut, "lost lock") {
		t.Errorf("stderr %q does not say the lock was lost", errOut)
	}
}

// A lock that expires unnoticed (here: it is replaced and deleted while
// locksmith cannot see it, between renewals) is reported at the release.
func TestRunLockGoneAtRelease(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	rkey := "locksmith:" + key
	// A long TTL: no renewal happens while the command runs.
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "60s", "--"},
		script(dir, `touch "$1/started"; while [ ! -e "$1/finish" ]; do sleep 0.05; done`)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	if err := client.Set(t.Context(), rkey, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	touch(t, dir+"/finish")
	p.expect(t, 79)
	if errOut := p.errOut(t); !strings.Contains(errOut, "expired or was taken") {
		t.Errorf("stderr %q does not say the lock was lost", errOut)
	}
	if got := client.Get(context.WithoutCancel(t.Context()), rkey).Val(); got != "someone-else" {
		t.Errorf("the new holder's lock was changed to %q", got)
	}
}

func TestRunCommandCannotStart(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key := uniqueKey(t)
	code, _, stderr := locksmith(t, nil, "run", "--redis", url, "--key", key, "--", "/nonexistent/dir/cmd")
	if code != 127 || !strings.Contains(stderr, "/nonexistent/dir/cmd") {
		t.Errorf("exit %d, stderr %q; want 127 and the command named", code, stderr)
	}
	if err := client.Get(t.Context(), "locksmith:"+key).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after a command that cannot run: %v, want no lock ever taken", err)
	}
}
