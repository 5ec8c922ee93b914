//go:build unix

package main_test

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// SIGINT, SIGTERM and SIGHUP sent to locksmith go to the command, and the
// lock is held until the command has exited.
func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			key, dir := uniqueKey(t), t.TempDir()
			p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--"}, trapping(dir)...)...)
			eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if got, want := trapped(t, dir), strings.TrimPrefix(signalName(sig), "SIG"); got != want {
				t.Errorf("the command got SIG%s, want %s", got, signalName(sig))
			}
			if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 1 {
				t.Error("the lock was released while the command was still running")
			}
			touch(t, dir+"/proceed")
			p.expect(t, 42)
			if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 0 {
				t.Error("the lock was not released after the command exited")
			}
		})
	}
}

// A signal ignored when locksmith started (nohup ignores SIGHUP) stays
// ignored: run neither dies of it nor passes it on, and passes on the
// others.
func TestRunLeavesIgnoredSignalsIgnored(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	// The shell ignores SIGHUP, then becomes locksmith, as nohup does.
	p := startProgram(t, nil, append([]string{"sh", "-c", `trap '' HUP; exec "$0" "$@"`,
		binary, "run", "--redis", url, "--key", key, "--"}, trapping(dir)...)...)
	eventually(t, 20*time.Second, func() bool { return exists(dir + "/started") }, "the command did not start")
	// SIGHUP first, then SIGTERM, which is passed on: had SIGHUP been
	// passed on too, the command would have noted it first.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if got := trapped(t, dir); got != "TERM" {
		t.Errorf("the command got %q, want only TERM", got)
	}
	if n := client.Exists(t.Context(), "locksmith:"+key).Val(); n != 1 {
		t.Error("the lock was released while the command was still running")
	}
	touch(t, dir+"/proceed")
	p.expect(t, 42)
}

// trapping returns a command, for run, that notes in dir/got each of
// SIGINT, SIGTERM and SIGHUP it gets (a line each, in the order it gets
// them), touches dir/started once its traps are set, and exits 42 once
// dir/proceed exists.
func trapping(dir string) []string {
	return script(dir, `on() { echo "$1" >> "$dir/got"; }
		dir=$1
		trap 'on INT' INT; trap 'on TERM' TERM; trap 'on HUP' HUP
		touch "$dir/started"
		while [ ! -e "$dir/proceed" ]; do sleep 0.05; done
		exit 42`)
}

// trapped waits for the command of trapping to note a signal, and returns
// what it has noted: the file exists before its first line is written, so
// it waits for a whole line.
func trapped(t *testing.T, dir string) string {
	t.Helper()
	eventually(t, 20*time.Second, func() bool { return strings.HasSuffix(readFile(t, dir+"/got"), "\n") },
		"the command got no signal")
	return strings.TrimSpace(readFile(t, dir+"/got"))
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// A signal while waiting for the lock ends the wait: nothing runs.
func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{nil, {"--once"}} {
		t.Run(strings.Join(append([]string{"run"}, flags...), " "), func(t *testing.T) {
			t.Parallel()
			// A server of its own, to see locksmith connect: by then it
			// has its signal handlers, and a SIGTERM no longer kills it
			// outright.
			srv := redistest.New(t)
			client := srv.Client(t)
			key, dir := uniqueKey(t), t.TempDir()
			if err := client.Set(t.Context(), "locksmith:"+key, "someone-else", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"run", "--redis", redisURL(srv, 0), "--key", key, "--wait", "60s"}, flags...)
			p := start(t, nil, append(args, "--", "touch", dir+"/ran")...)
			eventually(t, 20*time.Second, func() bool {
				return strings.Count(client.ClientList(t.Context()).Val(), "\n") >= 2
			}, "locksmith did not connect")
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.expect(t, 128+15)
			if errOut := p.errOut(t); !strings.Contains(errOut, "while obtaining lock") {
				t.Errorf("stderr %q does not say the wait was interrupted", errOut)
			}
			if exists(dir + "/ran") {
				t.Error("the command ran")
			}
			if got := client.Get(t.Context(), "locksmith:"+key).Val(); got != "someone-else" {
				t.Errorf("the holder's lock was changed to %q", got)
			}
		})
	}
}

// If locksmith is killed, so is the command: it must not run on with a
// lock that nobody renews.
func TestKillLocksmithKillsCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	t.Parallel()
	url, client := shared(t)
	key, dir := uniqueKey(t), t.TempDir()
	p := start(t, nil, append([]string{"run", "--redis", url, "--key", key, "--ttl", "5s", "--"},
		script(dir, `echo $$ > "$1/pid"; while :; do sleep 0.05; done`)...)...)
	pid := readPid(t, dir+"/pid")
	killAtEnd(t, pid)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	eventually(t, 10*time.Second, func() bool { return !alive(pid) }, "the command outlived locksmith")
	// Nobody released the lock: it expires with its TTL.
	if ttl := client.PTTL(t.Context(), "locksmith:"+key).Val(); ttl <= 0 {
		t.Errorf("PTTL = %v after locksmith was killed, want the lock left to expire", ttl)
	}
}
