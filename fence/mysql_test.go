package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mysqlDSNEnv holds the go-sql-driver DSN of a MySQL or MariaDB to use
// instead of a private MariaDB, such as root@tcp(127.0.0.1:3306)/test.
const mysqlDSNEnv = "LOCKSMITH_MYSQL_DSN"

// my is the MySQL or MariaDB of this test binary: from mysqlDSNEnv, or a
// private MariaDB started on first use when mariadb-install-db and
// mariadbd are installed; stopMySQL (from TestMain) stops what was
// started.
var my struct {
	once  sync.Once
	cfg   *mysql.Config // nil when there is none
	where string
	admin *sql.DB
	err   error
	named bool // the environment named the server: failing to reach it fails

	proc   *exec.Cmd
	exited chan struct{}
	dir    string
}

// mysqlDB returns a pool on a database of its own, dropped when t ends,
// with the driver's settings changed by each of opts. Without a server t
// is skipped: the MySQL tests are optional.
func mysqlDB(t *testing.T, opts ...func(*mysql.Config)) *sql.DB {
	t.Helper()
	my.once.Do(findMySQL)
	if my.admin == nil && my.named {
		t.Fatalf("the MySQL of $%s: %v", mysqlDSNEnv, my.err)
	}
	if my.admin == nil {
		unavailable(t, "LOCKSMITH_REQUIRE_MYSQL", "MySQL or MariaDB", my.err,
			"Set "+mysqlDSNEnv+" to a DSN such as root@tcp(127.0.0.1:3306)/test, or install mariadb-server for a private one")
	}
	name := uniqueIdent("t", t)
	if _, err := my.admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database on %s: %v", my.where, err)
	}
	cfg := my.cfg.Clone()
	cfg.DBName = name
	for _, o := range opts {
		o(cfg)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() {
		_ = db.Close()
		if _, err := my.admin.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return db
}

// findMySQL sets my up from mysqlDSNEnv, or by starting a private MariaDB.
func findMySQL() {
	if dsn := os.Getenv(mysqlDSNEnv); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			my.err, my.named = fmt.Errorf("$%s: %w", mysqlDSNEnv, err), true
			return
		}
		my.cfg, my.where, my.named = cfg, "$"+mysqlDSNEnv, true
		my.err = connectMySQL()
		return
	}
	my.err = startMariaDB()
	if my.err != nil {
		my.err = fmt.Errorf("%w; %s is not set either", my.err, mysqlDSNEnv)
		stopMySQL()
	}
}

// connectMySQL opens my.admin on my.cfg and waits until it answers.
func connectMySQL() error {
	connector, err := mysql.NewConnector(my.cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	if err := waitAnswers(db, my.where, "MariaDB", my.exited, filepath.Join(my.dir, "mariadbd.log")); err != nil {
		return err
	}
	my.admin = db
	return nil
}

// startMariaDB starts a private MariaDB in a temporary directory, on a
// free loopback port, without grant tables (anyone may connect as root),
// as the user mysql when the tests run as root.
func startMariaDB() error {
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return errors.New("mariadb-install-db is not on PATH")
	}
	server, err := exec.LookPath("mariadbd")
	if err != nil {
		return errors.New("mariadbd is not on PATH")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("mysql")
		if err != nil {
			return fmt.Errorf("running as root, and no user mysql to run MariaDB as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	my.dir, err = os.MkdirTemp("", "fence-mariadb-")
	if err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(my.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(my.dir, "data")
	cmd := exec.Command(install, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve")
	cmd.Dir = my.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(my.dir, "mariadbd.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	my.proc = exec.Command(server, "--no-defaults", "--datadir="+data, "--port="+strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--socket="+filepath.Join(my.dir, "mariadbd.sock"),
		"--skip-grant-tables", "--skip-log-bin", "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
		"--innodb-flush-log-at-trx-commit=0", "--max-connections=200")
	my.proc.Dir = my.dir
	my.proc.Stdout, my.proc.Stderr = logFile, logFile
	my.proc.SysProcAttr = procAttr(cred)
	if err := my.proc.Start(); err != nil {
		my.proc = nil
		return fmt.Errorf("start mariadbd: %w", err)
	}
	my.exited = make(chan struct{})
	go func(p *exec.Cmd, exited chan struct{}) {
		_ = p.Wait()
		close(exited)
	}(my.proc, my.exited)
	my.cfg = mysql.NewConfig()
	my.cfg.User = "root"
	my.cfg.Net = "tcp"
	my.cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	my.where = "a private MariaDB on " + my.cfg.Addr
	return connectMySQL()
}

// stopMySQL closes the admin pool and stops and removes a private server,
// if one was started.
func stopMySQL() {
	if my.admin != nil {
		_ = my.admin.Close()
		my.admin = nil
	}
	if my.proc != nil {
		_ = my.proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-my.exited:
		case <-time.After(20 * time.Second):
			_ = my.proc.Process.Kill()
			<-my.exited
		}
		my.proc = nil
	}
	if my.dir != "" {
		_ = os.RemoveAll(my.dir)
		my.dir = ""
	}
}
