// Package fence makes a database transaction's writes count only if the
// lock they were made under is still the newest one: it keeps, in a table
// of its own, the highest fencing token seen for each resource, and Check
// raises it, or refuses, in the caller's transaction.
//
// A lock obtained with locksmith.WithFencing carries a token (Lock.Fence)
// larger than every earlier holder's. A holder paused past its lock's
// expiry (a GC pause, a VM migration) wakes up still believing it holds
// the lock, while the next holder has taken it and written; its late
// writes must not land. Call Check at the start of the transaction that
// writes, with the resource's name and the token:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := fence.Check(ctx, tx, fence.Postgres, "invoice:7", lk.Fence()); err != nil {
//		return err // errors.Is(err, fence.ErrStaleFence): a newer holder has written
//	}
//	... the writes, in tx ...
//	return tx.Commit()
//
// Check is one upsert of the resource's row in the fence table. It takes
// that row's lock, which the database holds until the transaction ends, so
// writers of one resource are ordered by it: a writer with a lower token
// that comes after a higher one is refused, and one that comes while a
// higher one's transaction is open waits for it to end and is then
// refused if it committed. A rolled-back transaction leaves the fence
// where it was. A check made in a transaction of its own, before the
// writes, would leave a window between its commit and the writes in which
// a newer holder could write and be overwritten; so the check and the
// writes must share one transaction.
//
// A token equal to the highest seen is accepted: the same holder may run
// several transactions under one lock.
//
// The table is never created behind the caller's back: create it with
// CreateTable, or with the statement of PostgresSchema, SQLiteSchema or
// MySQLSchema (Table.Schema for another name), in a migration.
//
// The package uses only database/sql; it imports no driver.
package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
)

var (
	// ErrStaleFence means that a fencing token higher than the one given
	// to Check has been seen for the resource: a newer holder of the lock
	// has written, or is writing. The transaction must be rolled back,
	// and the caller must stop acting as the lock's holder.
	ErrStaleFence = errors.New("fence: stale fencing token")

	// ErrInvalidArgument means that a function of the package was given
	// something it cannot use (a zero fence, an empty resource, a bad
	// table name, an unknown dialect, a *sql.DB for Check); no SQL was
	// sent. Fix the code.
	ErrInvalidArgument = errors.New("fence: invalid argument")
)

// An Execer runs a statement. *sql.Tx and *sql.Conn are Execers; give
// Check the transaction that makes the writes. A *sql.Conn must be inside
// a transaction begun on it (with the SQL statement BEGIN, say), since
// the row lock that orders writers lasts only until that transaction
// ends. A *sql.DB is refused: each of its statements runs in a
// transaction of its own, on any connection of its pool.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Compile-time checks that the usual handles are Execers.
var (
	_ Execer = (*sql.Tx)(nil)
	_ Execer = (*sql.Conn)(nil)
)

// Check records fence as the highest fencing token seen for resource in
// the table DefaultTable, if no higher one has been, in the transaction
// of ex; see Table.Check.
func Check(ctx context.Context, ex Execer, dialect Dialect, resource string, fence int64) error {
	t, err := defaultTable(dialect)
	if err != nil {
		return err
	}
	return t.Check(ctx, ex, resource, fence)
}

// CreateTable creates the table DefaultTable for dialect, with the
// statement of PostgresSchema, SQLiteSchema or MySQLSchema, unless it
// exists; see Table.Create. ex is usually the *sql.DB.
func CreateTable(ctx context.Context, ex Execer, dialect Dialect) error {
	t, err := defaultTable(dialect)
	if err != nil {
		return err
	}
	return t.Create(ctx, ex)
}

// A Table is a fence table of a given name and dialect. Its methods are
// safe for concurrent use. The zero Table is not usable; make one with
// NewTable.
type Table struct {
	name    string
	dialect Dialect
	schema  string // CREATE TABLE IF NOT EXISTS ...
	upsert  string // the statement of Check; for MySQL, the first of two
	update  string // MySQL only: the statement that decides
}

// identifier is what NewTable accepts as a table name: a plain SQL
// identifier, optionally qualified by a schema (or, in MySQL, a database).
// Nothing is quoted, so PostgreSQL folds the name to lower case.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// NewTable returns the fence table called name (such as "fences" or
// "app.fences") in dialect. name must be an identifier, optionally
// qualified: letters, digits and underscores, not starting with a digit,
// at most 63 of them, with at most one dot; it is used unquoted. The
// error matches ErrInvalidArgument for another name or an unknown
// dialect.
func NewTable(dialect Dialect, name string) (*Table, error) {
	if !identifier.MatchString(name) {
		return nil, fmt.Errorf("%w: table name %q is not an identifier (letters, digits and _, not starting with a digit, at most one dot)", ErrInvalidArgument, name)
	}
	t := &Table{name: name, dialect: dialect}
	switch dialect {
	case Postgres:
		t.schema = fmt.Sprintf(postgresSchema, name)
		t.upsert = fmt.Sprintf(postgresUpsert, name)
	case SQLite:
		t.schema = fmt.Sprintf(sqliteSchema, name)
		t.upsert = fmt.Sprintf(sqliteUpsert, name)
	case MySQL:
		t.schema = fmt.Sprintf(mysqlSchema, name)
		t.upsert = fmt.Sprintf(mysqlEnsureRow, name)
		t.update = fmt.Sprintf(mysqlUpdate, name)
	default:
		return nil, fmt.Errorf("%w: unknown dialect %d", ErrInvalidArgument, int(dialect))
	}
	return t, nil
}

// Name returns the table's name, as given to NewTable.
func (t *Table) Name() string { return t.name }

// Dialect returns the table's dialect.
func (t *Table) Dialect() Dialect { return t.dialect }

// Schema returns the CREATE TABLE IF NOT EXISTS statement of the table,
// for a migration.
func (t *Table) Schema() string { return t.schema }

// Create runs the table's Schema statement with ex. It changes nothing
// when a table of that name exists, whatever its columns. Call it once,
// at setup; Check never creates the table.
func (t *Table) Create(ctx context.Context, ex Execer) error {
	if ex == nil {
		return fmt.Errorf("%w: nil Execer", ErrInvalidArgument)
	}
	if _, err := ex.ExecContext(ctx, t.schema); err != nil {
		return fmt.Errorf("fence: create table %s: %w", t.name, err)
	}
	return nil
}

// Check records fence as the highest fencing token seen for resource, in
// the transaction of ex, unless a higher one has been seen. It returns nil
// when fence is at least as high as every token seen for resource so far
// (equal is accepted: the holder of one lock may write several times
// under one token), and an error matching ErrStaleFence, naming resource
// and fence, when a higher one has been; the caller must then roll back
// and stop. Other errors come from the database, and leave the
// transaction in whatever state the database leaves it (PostgreSQL
// aborts it); roll it back.
//
// fence must be positive: a lock obtained without locksmith.WithFencing
// has the fence 0, which Check refuses with an error matching
// ErrInvalidArgument before it sends anything. resource must not be
// empty; for MySQL it is at most 255 bytes, compared byte by byte.
//
// Check takes the lock on the resource's row of the table, which the
// database keeps until the transaction commits or rolls back. A
// concurrent Check of the same resource waits for it, and then sees the
// token this one left if it committed, or the one before if it rolled
// back. Call Check before the writes it guards, in the same transaction:
// the transaction's writes then either commit with the highest token, or
// not at all. In PostgreSQL, Checks of different resources do not wait
// for each other; in SQLite every writer waits for the database lock, and
// in MySQL a first Check of a new resource may wait on InnoDB's gap locks.
//
// In PostgreSQL's REPEATABLE READ and SERIALIZABLE isolation levels, a
// Check that waited for a concurrent one which committed fails with a
// serialization error (SQLSTATE 40001) instead; retry the transaction,
// which then finds ErrStaleFence if the other token was higher. In MySQL
// and MariaDB, concurrent first Checks of a new resource may end in a
// deadlock error (1213), which also means: retry. In SQLite the whole
// database is locked by the first write, so give the connection a busy
// timeout, and begin the transaction with BEGIN IMMEDIATE (modernc.org's
// driver: _txlock=immediate) or call Check first.
//
// When ctx ends while Check waits for another transaction's row lock, the
// driver cancels the statement and Check returns an error matching ctx's
// (with PostgreSQL and pgx, TestCheckCancelledWhileWaiting): nothing was
// recorded, and the transaction, which database/sql rolls back when the
// context given to BeginTx ends, must not be committed. Check may be
// called from many goroutines at once, each with its own transaction.
func (t *Table) Check(ctx context.Context, ex Execer, resource string, fence int64) error {
	if err := t.checkArgs(ex, resource, fence); err != nil {
		return err
	}
	var res sql.Result
	var err error
	if t.dialect == MySQL {
		// See mysqlUpdate for why MySQL takes two statements.
		if _, err = ex.ExecContext(ctx, t.upsert, resource); err == nil {
			res, err = ex.ExecContext(ctx, t.update, fence, resource, fence)
		}
	} else {
		res, err = ex.ExecContext(ctx, t.upsert, resource, fence)
	}
	if err != nil {
		return fmt.Errorf("fence: check %q at fence %d: %w", resource, fence, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: check %q at fence %d: rows affected: %w", resource, fence, err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("%w: %q at fence %d: a higher fence has been seen for it", ErrStaleFence, resource, fence)
	default:
		// Only a table that is not ours (a trigger, a different key) can
		// do this; refuse rather than guess.
		return fmt.Errorf("fence: check %q at fence %d: %d rows affected, want 0 or 1; is %s the table of %s's Schema?", resource, fence, n, t.name, t.dialect)
	}
}

// checkArgs returns an error matching ErrInvalidArgument if Check cannot
// send anything for these arguments.
func (t *Table) checkArgs(ex Execer, resource string, fence int64) error {
	if fence <= 0 {
		return fmt.Errorf("%w: fence %d for %q: a fencing token is positive; obtain the lock with locksmith.WithFencing", ErrInvalidArgument, fence, resource)
	}
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalidArgument)
	}
	if t.dialect == MySQL && len(resource) > mysqlMaxResource {
		return fmt.Errorf("%w: resource name of %d bytes; the MySQL table holds at most %d", ErrInvalidArgument, len(resource), mysqlMaxResource)
	}
	return checkExecer(ex)
}

// checkExecer refuses what cannot hold a transaction.
func checkExecer(ex Execer) error {
	switch ex.(type) {
	case nil:
		return fmt.Errorf("%w: nil Execer", ErrInvalidArgument)
	case *sql.DB:
		return fmt.Errorf("%w: a *sql.DB runs each statement in a transaction of its own; give Check the *sql.Tx of the writes", ErrInvalidArgument)
	}
	return nil
}
