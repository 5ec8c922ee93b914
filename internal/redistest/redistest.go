// Package redistest starts private redis-server processes for tests: each
// on a free loopback port, in its own temporary directory, without
// persistence, stopped when the test (or the test binary) is done. On
// Linux a server is also killed if the test binary dies.
//
// When redis-server is not on PATH the tests that need it are skipped with
// a loud message, unless the environment variable named by RequireEnv is
// set to a non-empty value other than "0", in which case they fail.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv names the environment variable that turns a missing
// redis-server from a skip into a failure. CI sets it.
const RequireEnv = "LOCKSMITH_REQUIRE_REDIS"

// startTimeout bounds how long a server may take to answer its first PING.
const startTimeout = 10 * time.Second

// A Server is one redis-server process started by Start.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// Password is the password the server requires, given to Start as
	// "--requirepass", PASSWORD; "" when it requires none. Options and
	// Client use it.
	Password string

	dir  string
	args []string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// Required reports whether RequireEnv asks for a real Redis.
func Required() bool {
	v := os.Getenv(RequireEnv)
	return v != "" && v != "0"
}

// Require skips t, or fails it when Required, unless redis-server is on
// PATH.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing(t, &serverNotice, "redis-server", "a real Redis",
			"Install it (apt-get install redis-server, brew install redis)")
	}
}

// serverNotice and cliNotice make missing announce each missing program
// once per test binary.
var serverNotice, cliNotice sync.Once

// missing ends t because program is not on PATH. When Required, t fails,
// saying so. Otherwise t is skipped, and the first skip of the test binary
// for this program is also announced on the terminal (or on stderr when
// there is none): go test shows a skip's message only with -v, and shows
// nothing but "ok" for a passing package of ./..., even what the test
// binary writes to stderr.
func missing(t testing.TB, notice *sync.Once, program, needs, install string) {
	t.Helper()
	if Required() {
		t.Fatalf("\n*** %s not found on PATH: %s FAILS, because %s=%s requires %s.\n"+
			"*** %s, or unset %s to skip such tests instead. ***",
			program, t.Name(), RequireEnv, os.Getenv(RequireEnv), needs, install, RequireEnv)
	}
	notice.Do(func() {
		out := io.Writer(os.Stderr)
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			out = tty
		}
		fmt.Fprintf(out, "\n*** %s not found on PATH: SKIPPING the tests that need %s, starting with %s.\n"+
			"*** %s, or set %s=1 to make this a failure; go test -v lists every skipped test. ***\n",
			program, needs, t.Name(), install, RequireEnv)
	})
	t.Skipf("\n*** %s not found on PATH: SKIPPING %s, which needs %s.\n"+
		"*** %s, or set %s=1 to make this a failure. ***", program, t.Name(), needs, install, RequireEnv)
}

// New starts a server for t and stops it when t ends. extra are further
// redis-server arguments, such as "--maxmemory", "1mb", or
// "--requirepass", "secret".
func New(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	return startFor(t, func(dir string) (*Server, error) { return Start(dir, extra...) })
}

var shared sharedDeployment[*Server]

// Shared returns a server started once per test binary for the tests that
// need no server of their own; they must use keys of their own. Call
// StopShared from TestMain after m.Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	Require(t)
	return shared.get(t, "server", func(dir string) (*Server, error) { return Start(dir) })
}

// StopShared stops the server Shared started, if any, and removes its files.
func StopShared() { shared.stop() }

// Start starts a redis-server whose files live in dir, with the extra
// arguments, as New does. It tries a few free ports in case another
// process takes the one it picked first.
func Start(dir string, extra ...string) (*Server, error) {
	password := requirePass(extra)
	var errs []error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Password: password, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--save", "",
			"--appendonly", "no",
			"--protected-mode", "no",
			"--enable-debug-command", "local",
			"--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)),
		}, extra...)
		if err := s.Start(); err == nil {
			return s, nil
		} else {
			errs = append(errs, err)
		}
	}
	return nil, errors.Join(errs...)
}

// Start (re)starts a stopped server on its address, empty.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("already running")
	}
	p, err := startProcess(exec.Command("redis-server", s.args...))
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	if err := waitReady(s.Addr, s.Password, p); err != nil {
		p.stop(syscall.SIGKILL)
		return fmt.Errorf("redis-server on %s: %w (log: %s)", s.Addr, err, s.logTail())
	}
	s.proc = p
	return nil
}

// Stop terminates the server and waits for it. It is safe to call on a
// stopped server.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Kill kills the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.stop(sig)
	s.proc = nil
}

// Restart stops the server and starts it again, empty, on the same address.
func (s *Server) Restart() error {
	s.Stop()
	return s.Start()
}

// Pid returns the server's process id, or 0 while it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a new client of the server, closed when t ends. Each call
// opens its own connection pool.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Options returns client options for the server.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, Password: s.Password, Protocol: 2}
}

func (s *Server) logTail() string {
	matches, _ := filepath.Glob(filepath.Join(s.dir, "redis-*.log"))
	var b strings.Builder
	for _, m := range matches {
		data, _ := os.ReadFile(m)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		b.WriteString(strings.Join(lines, " | "))
	}
	return b.String()
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// requirePass returns the password that the redis-server arguments args
// set with --requirepass, or "".
func requirePass(args []string) string {
	password := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			password = args[i+1] // the last one wins, as in redis-server
			i++
		}
	}
	return password
}

// waitReady polls addr with PING, authenticated with password if it is
// not empty, until it answers PONG, p exits, or startTimeout passes.
func waitReady(addr, password string, p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		if ping(addr, password) == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before answering: %v", p.err)
		case <-ctx.Done():
			return errors.New("no answer to PING")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ping sends PING to addr, after AUTH when password is not empty, and
// checks the replies.
func ping(addr, password string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	if password != "" {
		if err := roundTrip(c, r, "+OK\r\n", "AUTH", password); err != nil {
			return err
		}
	}
	return roundTrip(c, r, "+PONG\r\n", "PING")
}

// roundTrip sends the command args, as a RESP array so that any argument
// may contain spaces, and checks that the reply is want.
func roundTrip(c net.Conn, r *bufio.Reader, want string, args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != want {
		// A refused AUTH does not quote the password.
		return fmt.Errorf("%s answered %q", args[0], line)
	}
	return nil
}
