package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksmith-go/locksmith/fence"
)

// backendPID returns the server's id of conn's session.
func (b backend) backendPID(t *testing.T, conn *sql.Conn) int64 {
	t.Helper()
	query := "SELECT pg_backend_pid()"
	if b.dialect == fence.MySQL {
		query = "SELECT CONNECTION_ID()"
	}
	var pid int64
	if err := conn.QueryRowContext(t.Context(), query).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitLockWait waits until the server shows the session pid waiting for
// a row lock, or fails t after 10s.
func (b backend) waitLockWait(t *testing.T, pid int64) {
	t.Helper()
	query := "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'"
	poll := 5 * time.Millisecond
	if b.dialect == fence.MySQL {
		query = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'"
		// InnoDB refreshes what INNODB_TRX shows only when it was last
		// read more than 100ms ago: faster polling would see it frozen.
		poll = 150 * time.Millisecond
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := b.db.QueryRowContext(t.Context(), query, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d is not waiting for a lock after 10s", pid)
		}
		time.Sleep(poll)
	}
}

// TestCheckWaitsForOpenTransaction shows the row lock ordering two
// writers: a second Check of a resource waits while the first's
// transaction is open, and then decides on what that transaction left:
// its fence if it committed, the one before if it rolled back. The second
// writer uses a *sql.Conn with a transaction begun by SQL.
func TestCheckWaitsForOpenTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		if b.dialect == fence.SQLite {
			t.Skip("SQLite has no row locks: its first write locks the whole database, so a second writer waits in BEGIN IMMEDIATE")
		}
		ctx := t.Context()
		if err := fence.CreateTable(ctx, b.db, b.dialect); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			first, second int64
			commit        bool // the first writer commits; else it rolls back
			stale         bool // the second is refused
			stored        int64
		}{
			{10, 5, true, true, 10},
			{10, 5, false, false, 5},
			{10, 10, true, false, 10},
			{10, 20, true, false, 20},
			{10, 20, false, false, 20},
		}
		for i, c := range cases {
			t.Run(fmt.Sprintf("%d_then_%d_commit_%v", c.first, c.second, c.commit), func(t *testing.T) {
				resource := fmt.Sprintf("job:%d", i)
				first, err := b.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer first.Rollback()
				if err := fence.Check(ctx, first, b.dialect, resource, c.first); err != nil {
					t.Fatal(err)
				}

				conn, err := b.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				pid := b.backendPID(t, conn)
				done := make(chan error, 1)
				go func() {
					if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
						done <- err
						return
					}
					err := fence.Check(ctx, conn, b.dialect, resource, c.second)
					end := "COMMIT"
					if err != nil {
						end = "ROLLBACK"
					}
					if _, err := conn.ExecContext(ctx, end); err != nil {
						done <- fmt.Errorf("%s: %w", end, err)
						return
					}
					done <- err
				}()
				b.waitLockWait(t, pid)
				select {
				case err := <-done:
					t.Fatalf("the second Check returned (%v) while the first transaction was open", err)
				default:
				}
				if c.commit {
					err = first.Commit()
				} else {
					err = first.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				err = <-done
				if c.stale != errors.Is(err, fence.ErrStaleFence) || (!c.stale && err != nil) {
					t.Fatalf("the second Check: got %v, want stale %v", err, c.stale)
				}
				if got := b.storedFence(t, fence.DefaultTable, resource); got != c.stored {
					t.Errorf("stored fence %d, want %d", got, c.stored)
				}
			})
		}
	})
}

// TestPostgresRepeatableRead shows what the documentation says of the
// stricter isolation levels: a Check that waited for a transaction which
// committed fails with a serialization error, and a retry then decides.
func TestPostgresRepeatableRead(t *testing.T) {
	b := backend{dialect: fence.Postgres, db: postgresDB(t)}
	ctx := t.Context()
	if err := fence.CreateTable(ctx, b.db, b.dialect); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		second int64
		stale  bool // on retry
	}{{5, true}, {20, false}} {
		resource := fmt.Sprintf("job:%d", c.second)
		first, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.Check(ctx, first, b.dialect, resource, 10); err != nil {
			t.Fatal(err)
		}
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		first, err = b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.Check(ctx, first, b.dialect, resource, 11); err != nil {
			t.Fatal(err)
		}
		conn, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pid := b.backendPID(t, conn)
		second := func() error {
			tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fence.Check(ctx, tx, b.dialect, resource, c.second); err != nil {
				return err
			}
			return tx.Commit()
		}
		done := make(chan error, 1)
		go func() { done <- second() }()
		b.waitLockWait(t, pid)
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		err = <-done
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			t.Fatalf("fence %d after a concurrent commit, in REPEATABLE READ: got %v, want SQLSTATE 40001", c.second, err)
		}
		if err := second(); c.stale != errors.Is(err, fence.ErrStaleFence) || (!c.stale && err != nil) {
			t.Fatalf("fence %d, retried: got %v, want stale %v", c.second, err, c.stale)
		}
		_ = conn.Close()
	}
}

// TestMySQLAffectedRows shows why Check sends two statements to MySQL: the
// one-statement upsert reports 0 both for an equal fence (to accept) and
// a lower one (to refuse), and with CLIENT_FOUND_ROWS reports 1 for a
// lower one, as for an insert. Check, on a connection with
// CLIENT_FOUND_ROWS, still tells them apart.
func TestMySQLAffectedRows(t *testing.T) {
	plain := backend{dialect: fence.MySQL, db: mysqlDB(t)}
	found := backend{dialect: fence.MySQL, db: mysqlDB(t, func(c *mysql.Config) { c.ClientFoundRows = true })}
	const upsert = `INSERT INTO naive (resource, fence) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE fence = IF(fence <= VALUES(fence), VALUES(fence), fence)`
	for _, c := range []struct {
		b    backend
		name string
		want []int64 // for: insert 10, 20 (higher), 20 (equal), 15 (lower)
	}{
		{plain, "default", []int64{1, 2, 0, 0}},
		{found, "CLIENT_FOUND_ROWS", []int64{1, 2, 1, 1}},
	} {
		c.b.exec(t, "CREATE TABLE naive (resource VARBINARY(255) PRIMARY KEY, fence BIGINT NOT NULL)")
		var got []int64
		for _, f := range []int64{10, 20, 20, 15} {
			res, err := c.b.db.ExecContext(t.Context(), upsert, "job", f)
			if err != nil {
				t.Fatal(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: rows affected %v, want %v", c.name, got, c.want)
		}
	}

	ctx := t.Context()
	if err := fence.CreateTable(ctx, found.db, fence.MySQL); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		fence int64
		stale bool
	}{{10, false}, {20, false}, {20, false}, {15, true}, {21, false}} {
		err := found.checkIn(ctx, mustTable(t, fence.MySQL, fence.DefaultTable), "job", s.fence)
		if s.stale != errors.Is(err, fence.ErrStaleFence) || (!s.stale && err != nil) {
			t.Errorf("Check(%d) with CLIENT_FOUND_ROWS: got %v, want stale %v", s.fence, err, s.stale)
		}
	}
	if got := found.storedFence(t, fence.DefaultTable, "job"); got != 21 {
		t.Errorf("stored fence %d, want 21", got)
	}
}

func mustTable(t *testing.T, d fence.Dialect, name string) *fence.Table {
	t.Helper()
	tbl, err := fence.NewTable(d, name)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestCheckCancelledWhileWaiting shows a Check whose context ends while
// it waits for another transaction's row lock: it returns the context's
// error, and leaves the fence as the other transaction leaves it.
func TestCheckCancelledWhileWaiting(t *testing.T) {
	b := backend{dialect: fence.Postgres, db: postgresDB(t)}
	ctx := t.Context()
	if err := fence.CreateTable(ctx, b.db, b.dialect); err != nil {
		t.Fatal(err)
	}
	first, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback()
	if err := fence.Check(ctx, first, b.dialect, "job", 10); err != nil {
		t.Fatal(err)
	}

	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pid := b.backendPID(t, conn)
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		tx, err := conn.BeginTx(waitCtx, nil)
		if err != nil {
			done <- err
			return
		}
		defer tx.Rollback()
		if err := fence.Check(waitCtx, tx, b.dialect, "job", 20); err != nil {
			done <- err
			return
		}
		done <- tx.Commit()
	}()
	b.waitLockWait(t, pid)
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("a Check cancelled while waiting: got %v, want context.Canceled", err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := b.storedFence(t, fence.DefaultTable, "job"); got != 10 {
		t.Errorf("stored fence %d, want 10: the cancelled check changed it", got)
	}
}
