//go:build unix

package main_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/leakcheck"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// binary is the locksmith command under test, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	// go-redis logs failed dials; some tests stop Redis on purpose.
	redis.SetLogger(quietLogger{})
	// Under nohup (SIGHUP) or in a shell's background job (SIGINT) the
	// tests would inherit an ignored signal and pass it on to every
	// locksmith they start, which then leaves it ignored (as it should):
	// catch those here, so that the processes the tests start begin with
	// each signal's default action, as from a terminal. A test that needs
	// an ignored signal ignores it in the process it starts.
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
	dir, err := os.MkdirTemp("", "locksmith-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := buildAndRun(m, dir)
	redistest.StopShared()
	redistest.StopSharedCluster()
	redistest.StopSharedSentinel()
	os.RemoveAll(dir)
	os.Exit(leakcheck.After(code))
}

// buildAndRun builds the command into dir, with the race detector when the
// tests have it, and runs the tests.
func buildAndRun(m *testing.M, dir string) int {
	binary = filepath.Join(dir, "locksmith")
	args := []string{"build", "-o", binary}
	if raceEnabled() {
		args = append(args, "-race")
	}
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building locksmith: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// A proc is a locksmith process started by a test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr string // file names
	done           chan struct{}
	code           int // valid once done is closed
}

// start starts locksmith with args. Its environment is the test's without
// REDIS_URL (so that no test reaches a Redis by accident), plus env. The
// process is killed, if still running, when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startProgram(t, env, append([]string{binary}, args...)...)
}

// startProgram is start for any program: argv[0] is its path, the rest
// its arguments (a shell that sets up a process and execs locksmith, say).
func startProgram(t *testing.T, env []string, argv ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{
		stdout: filepath.Join(dir, "stdout"),
		stderr: filepath.Join(dir, "stderr"),
		done:   make(chan struct{}),
	}
	// Files, not pipes: a pipe would keep Wait waiting for any process
	// that inherited it.
	stdout, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// The race detector sleeps a second before exiting unless told not to.
	p.cmd.Env = append(environWithout("REDIS_URL"), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		var exitErr *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exitErr):
			p.code = exitErr.ExitCode()
		default:
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func environWithout(name string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, name+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// wait waits for p to exit and returns its exit status; it fails t if p
// runs longer than timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		if strings.Contains(p.errOut(t), "WARNING: DATA RACE") {
			t.Errorf("locksmith %q had a data race:\n%s", p.cmd.Args[1:], p.errOut(t))
		}
		return p.code
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("locksmith %q still running after %v\nstdout: %s\nstderr: %s",
			p.cmd.Args[1:], timeout, p.out(t), p.errOut(t))
		return 0
	}
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) out(t *testing.T) string    { return readFile(t, p.stdout) }
func (p *proc) errOut(t *testing.T) string { return readFile(t, p.stderr) }

// expect waits for p and fails t unless it exits with want.
func (p *proc) expect(t *testing.T, want int) {
	t.Helper()
	if got := p.wait(t, 30*time.Second); got != want {
		t.Fatalf("locksmith %q exited with %d, want %d\nstdout: %s\nstderr: %s",
			p.cmd.Args[1:], got, want, p.out(t), p.errOut(t))
	}
}

// locksmith runs locksmith to completion and returns its exit status,
// stdout and stderr.
func locksmith(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(t, 30*time.Second)
	return code, p.out(t), p.errOut(t)
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// eventually fails t unless cond becomes true within d, polling.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: "+msg, append([]any{d}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// touch creates the file name.
func touch(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

var keySeq atomic.Int64

// uniqueKey returns a lock key no other test uses, even on a shared server.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("test:%s:%d:%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

// redisURL returns the URL of srv's database db.
func redisURL(srv *redistest.Server, db int) string {
	return fmt.Sprintf("redis://%s/%d", srv.Addr, db)
}

// shared returns the shared server's URL and a client of it.
func shared(t *testing.T) (string, *redis.Client) {
	t.Helper()
	srv := redistest.Shared(t)
	return redisURL(srv, 0), srv.Client(t)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// script returns the arguments that make sh run src with $1 set to dir.
func script(dir, src string) []string {
	return []string{"sh", "-c", src, "sh", dir}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	// An orphan's zombie lingers where nothing reaps it (in a container
	// whose init does not): it is dead all the same.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil { // gone meanwhile, or no /proc
		return syscall.Kill(pid, 0) == nil
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// readPid waits for the file name to hold a process id and returns it.
func readPid(t *testing.T, name string) int {
	t.Helper()
	var pid int
	eventually(t, 20*time.Second, func() bool {
		_, err := fmt.Sscan(readFile(t, name), &pid)
		return err == nil && pid > 0
	}, "no pid in %s", name)
	return pid
}

// killAtEnd kills process pid, if it is still running, when the test ends,
// so that a failed test leaves no process behind.
func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}
