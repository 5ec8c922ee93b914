package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The environment variables that choose the PostgreSQL of the tests.
const (
	// postgresURLEnv holds the connection string of a PostgreSQL to use
	// instead of a private one, such as postgres://postgres@127.0.0.1/test.
	// Without it, the standard PG* variables (PGHOST, PGPORT, PGUSER,
	// PGDATABASE, ...) do the same when any of them is set.
	postgresURLEnv = "LOCKSMITH_POSTGRES_URL"
	// requirePostgresEnv turns a missing PostgreSQL from a skip into a
	// failure. CI sets it.
	requirePostgresEnv = "LOCKSMITH_REQUIRE_POSTGRES"
)

// pgEnvVars are the libpq variables that, when one is set, point the
// tests at an existing server.
var pgEnvVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"}

// pg is the PostgreSQL of this test binary: found in the environment, or
// started privately, on first use; stopPostgres (from TestMain) stops what
// was started.
var pg struct {
	once  sync.Once
	conn  string  // the connection string; "" for the PG* variables alone
	where string  // where it is, for logs
	admin *sql.DB // nil when there is none
	err   error   // why there is none
	// named is set when the environment named the server: then a server
	// that does not answer fails the tests rather than skipping them.
	named bool

	// A private server, nil when none was started.
	proc   *exec.Cmd
	exited chan struct{} // closed when proc has exited
	dir    string
}

// postgresDB returns a connection pool to a schema of its own on the test
// binary's PostgreSQL (the schema is first on its search_path), dropped
// when t ends. Without a PostgreSQL, t is skipped, or fails when
// requirePostgresEnv is set.
func postgresDB(t *testing.T) *sql.DB {
	t.Helper()
	pg.once.Do(findPostgres)
	if pg.admin == nil && pg.named {
		t.Fatalf("the PostgreSQL the environment names: %v", pg.err)
	}
	if pg.admin == nil {
		unavailable(t, requirePostgresEnv, "PostgreSQL", pg.err,
			"Set "+postgresURLEnv+" (or PGHOST etc.) to a server's connection string, or install PostgreSQL (apt-get install postgresql) for initdb")
	}
	schema := uniqueIdent("t", t)
	if _, err := pg.admin.ExecContext(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema on %s: %v", pg.where, err)
	}
	cfg, err := pgx.ParseConfig(pg.conn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() {
		_ = db.Close()
		if _, err := pg.admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return db
}

// findPostgres sets pg up: from postgresURLEnv, else from the PG*
// variables, else by starting a private server.
func findPostgres() {
	if u := os.Getenv(postgresURLEnv); u != "" {
		pg.conn, pg.where, pg.named = u, "$"+postgresURLEnv, true
		pg.err = connectPostgres()
		return
	}
	for _, v := range pgEnvVars {
		if os.Getenv(v) != "" {
			pg.where, pg.named = "the server of $"+v, true
			pg.err = connectPostgres()
			return
		}
	}
	pg.err = startPostgres()
	if pg.err != nil {
		stopPostgres()
	}
}

// connectPostgres opens pg.admin on pg.conn and waits until it answers.
func connectPostgres() error {
	db, err := sql.Open("pgx", pg.conn)
	if err != nil {
		return fmt.Errorf("%s: %w", pg.where, err)
	}
	if err := waitAnswers(db, pg.where, "PostgreSQL", pg.exited, filepath.Join(pg.dir, "postgres.log")); err != nil {
		return err
	}
	pg.admin = db
	return nil
}

// waitAnswers waits up to 20s until db answers a ping, and closes it when
// it does not: the server where, a private one of the kind what when
// exited is not nil (closed when its process has exited, whose log is at
// log).
func waitAnswers(db *sql.DB, where, what string, exited chan struct{}, log string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited: // never ready when nil
			_ = db.Close()
			return fmt.Errorf("the private %s exited: %w\n%s", what, err, logTail(log))
		default:
		}
		if time.Now().After(deadline) {
			_ = db.Close()
			return fmt.Errorf("%s does not answer: %w", where, err)
		}
		time.Sleep(50 * time.Millisecond) // a server starting up: poll
	}
}

// startPostgres starts a private PostgreSQL: initdb in a temporary
// directory, then postgres on a free loopback port, without sync and
// without a Unix socket, as the user postgres when the tests run as root.
func startPostgres() error {
	initdb, err := findInitdb()
	if err != nil {
		return err
	}
	bin := filepath.Dir(initdb)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root, and PostgreSQL refuses root: no user postgres to run it as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pg.dir, err = os.MkdirTemp("", "fence-postgres-")
	if err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(pg.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(pg.dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = pg.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(pg.dir, "postgres.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	pg.proc = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	pg.proc.Dir = pg.dir
	pg.proc.Stdout, pg.proc.Stderr = logFile, logFile
	pg.proc.SysProcAttr = procAttr(cred)
	if err := pg.proc.Start(); err != nil {
		pg.proc = nil
		return fmt.Errorf("start postgres: %w", err)
	}
	pg.exited = make(chan struct{})
	go func(p *exec.Cmd, exited chan struct{}) {
		_ = p.Wait()
		close(exited)
	}(pg.proc, pg.exited)
	pg.conn = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port)
	pg.where = "a private PostgreSQL on 127.0.0.1:" + strconv.Itoa(port)
	return connectPostgres()
}

// findInitdb returns initdb's path: on PATH, or in Debian's
// /usr/lib/postgresql/VERSION/bin, the newest version first. The postgres
// binary is in the same directory (symlinks resolved).
func findInitdb() (string, error) {
	path, err := exec.LookPath("initdb")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		sort.Slice(found, func(i, j int) bool { return pgVersion(found[i]) > pgVersion(found[j]) })
		if len(found) == 0 {
			return "", errors.New("initdb is not on PATH nor in /usr/lib/postgresql/*/bin")
		}
		path = found[0]
	}
	return filepath.EvalSymlinks(path)
}

// pgVersion returns the major version in a path like
// /usr/lib/postgresql/15/bin/initdb.
func pgVersion(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// stopPostgres closes the admin pool and stops and removes a private
// server, if one was started.
func stopPostgres() {
	if pg.admin != nil {
		_ = pg.admin.Close()
		pg.admin = nil
	}
	if pg.proc != nil {
		_ = pg.proc.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-pg.exited:
		case <-time.After(10 * time.Second):
			_ = pg.proc.Process.Kill()
			<-pg.exited
		}
		pg.proc = nil
	}
	if pg.dir != "" {
		_ = os.RemoveAll(pg.dir)
		pg.dir = ""
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last lines of the file at path, for a failure
// message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
