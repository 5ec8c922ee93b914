package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/fence"
	"github.com/locksmith-go/locksmith/internal/leakcheck"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // the restart test makes go-redis log failed dials
	code := m.Run()
	redistest.StopShared()
	stopPostgres()
	stopMySQL()
	os.Exit(leakcheck.After(code))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// required reports whether the environment variable env asks for a real
// server (any value but "" and "0").
func required(env string) bool {
	v := os.Getenv(env)
	return v != "" && v != "0"
}

// notices makes unavailable announce each missing server once per test
// binary.
var notices sync.Map // what -> *sync.Once

// unavailable ends t because there is no server of kind what (why says
// what was tried). When env is set, t fails. Otherwise t is skipped, and
// the first skip for what is also written to the terminal (or stderr),
// since go test shows skips only with -v.
func unavailable(t *testing.T, env, what string, why error, fix string) {
	t.Helper()
	if required(env) {
		t.Fatalf("\n*** no %s: %v\n*** %s FAILS, because %s=%s requires one. %s. ***",
			what, why, t.Name(), env, os.Getenv(env), fix)
	}
	once, _ := notices.LoadOrStore(what, new(sync.Once))
	once.(*sync.Once).Do(func() {
		out := io.Writer(os.Stderr)
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			out = tty
		}
		fmt.Fprintf(out, "\n*** no %s (%v): SKIPPING the tests that need one, starting with %s.\n"+
			"*** %s, or set %s=1 to make this a failure. ***\n", what, why, t.Name(), fix, env)
	})
	t.Skipf("\n*** no %s (%v): SKIPPING %s.\n*** %s, or set %s=1 to make this a failure. ***",
		what, why, t.Name(), fix, env)
}

var identSeq atomic.Int64

var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// uniqueIdent returns an SQL identifier, unique in this test binary and
// unlikely to clash with another's, made from prefix and t's name.
func uniqueIdent(prefix string, t *testing.T) string {
	name := notIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	id := fmt.Sprintf("%s_%d_%d_", prefix, os.Getpid(), identSeq.Add(1))
	if len(id)+len(name) > 63 {
		name = name[:63-len(id)]
	}
	return id + name
}

// A backend is a database the behaviour tests run against, with a
// database or schema of their own.
type backend struct {
	dialect fence.Dialect
	db      *sql.DB
	// serial is the type of an auto-incremented primary key column.
	serial string
	// text is the type of a short string column.
	text string
}

// q rewrites the ? placeholders of query for b's driver.
func (b backend) q(query string) string {
	if b.dialect != fence.Postgres {
		return query
	}
	var sb strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			sb.WriteString("$" + strconv.Itoa(n))
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// exec runs query (with ? placeholders) on b.db, failing t on an error.
func (b backend) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.db.ExecContext(t.Context(), b.q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// storedFence returns the fence stored for resource in table, or 0 when
// it has no row.
func (b backend) storedFence(t *testing.T, table, resource string) int64 {
	t.Helper()
	var f int64
	err := b.db.QueryRowContext(t.Context(), b.q("SELECT fence FROM "+table+" WHERE resource = ?"), resource).Scan(&f)
	if err == sql.ErrNoRows {
		return 0
	}
	if err != nil {
		t.Fatalf("read the fence of %q: %v", resource, err)
	}
	return f
}

// eachBackend runs fn as a subtest on SQLite (a file of its own), on
// PostgreSQL (a schema of its own) and on MySQL or MariaDB (a database of
// its own); the latter two are skipped without a server.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, backend{dialect: fence.SQLite, db: sqliteDB(t), serial: "INTEGER PRIMARY KEY AUTOINCREMENT", text: "TEXT"})
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, backend{dialect: fence.Postgres, db: postgresDB(t), serial: "BIGSERIAL PRIMARY KEY", text: "TEXT"})
	})
	t.Run("mysql", func(t *testing.T) {
		fn(t, backend{dialect: fence.MySQL, db: mysqlDB(t), serial: "BIGINT AUTO_INCREMENT PRIMARY KEY", text: "VARCHAR(64)"})
	})
}

// sqliteDB returns a pool on a new SQLite database file, closed when t
// ends. Transactions begin with BEGIN IMMEDIATE, and a writer waits up to
// 20s for another's to end, as the package documentation advises.
func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// fencingLocker returns a Locker with fencing on the Redis that client
// reaches, closed when t ends.
func fencingLocker(t *testing.T, client redis.UniversalClient) *locksmith.Locker {
	t.Helper()
	l := locksmith.New(client, locksmith.WithFencing())
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newClient returns a client of s with hooks, closed when t ends.
func newClient(t *testing.T, s *redistest.Server, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
