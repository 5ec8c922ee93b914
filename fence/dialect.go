package fence

import "fmt"

// A Dialect is the SQL dialect of a database, which decides the
// statements a Table sends. The zero Dialect is not one.
type Dialect int

const (
	// Postgres is PostgreSQL's dialect (9.5 or newer, for ON CONFLICT),
	// with $1 placeholders, as pgx and lib/pq take them.
	Postgres Dialect = iota + 1
	// SQLite is SQLite's dialect (3.24 or newer, for ON CONFLICT), with ?
	// placeholders.
	SQLite
	// MySQL is the dialect of MySQL and MariaDB, with ? placeholders, for
	// InnoDB tables.
	MySQL
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case SQLite:
		return "SQLite"
	case MySQL:
		return "MySQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the name of the table that Check and CreateTable use.
const DefaultTable = "fences"

// The statements that create DefaultTable, one per dialect, for a
// migration; CreateTable runs them. Each holds one row per resource with
// the highest fencing token seen for it. MySQL's has a third column,
// accepted, which counts the checks accepted for the resource: Check
// needs a column that every accepted check changes (see Table.Check).
const (
	PostgresSchema = `CREATE TABLE IF NOT EXISTS fences (
	resource TEXT PRIMARY KEY,
	fence    BIGINT NOT NULL
)`
	SQLiteSchema = `CREATE TABLE IF NOT EXISTS fences (
	resource TEXT PRIMARY KEY NOT NULL,
	fence    INTEGER NOT NULL
)`
	MySQLSchema = `CREATE TABLE IF NOT EXISTS fences (
	resource VARBINARY(255) NOT NULL PRIMARY KEY,
	fence    BIGINT NOT NULL,
	accepted BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`
)

// The templates of a Table's statements; %[1]s is the table's name. The
// schema templates are the constants above with the name left open, which
// a test checks.
const (
	postgresSchema = `CREATE TABLE IF NOT EXISTS %[1]s (
	resource TEXT PRIMARY KEY,
	fence    BIGINT NOT NULL
)`
	sqliteSchema = `CREATE TABLE IF NOT EXISTS %[1]s (
	resource TEXT PRIMARY KEY NOT NULL,
	fence    INTEGER NOT NULL
)`
	mysqlSchema = `CREATE TABLE IF NOT EXISTS %[1]s (
	resource VARBINARY(255) NOT NULL PRIMARY KEY,
	fence    BIGINT NOT NULL,
	accepted BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`

	// The upsert inserts the resource's row, or raises its fence if the
	// stored one is not higher. Either way it locks the row until the
	// transaction ends. It affects 1 row when it inserted or raised, and
	// 0 when the WHERE refused (the row is locked all the same).
	postgresUpsert = `INSERT INTO %[1]s AS f (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence
WHERE f.fence <= EXCLUDED.fence`
	sqliteUpsert = `INSERT INTO %[1]s AS f (resource, fence) VALUES (?, ?)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence
WHERE f.fence <= excluded.fence`

	// MySQL's one-statement upsert, INSERT ... ON DUPLICATE KEY UPDATE
	// fence = IF(fence <= VALUES(fence), VALUES(fence), fence), cannot
	// say yes or no by its row count: it reports 1 for an insert, 2 for a
	// changed row and 0 for a row left as it was, which is both a stale
	// fence and an equal one (accepted); and on a connection with
	// CLIENT_FOUND_ROWS (go-sql-driver's clientFoundRows=true) a row left
	// as it was counts 1, like an insert, so a stale fence would pass.
	// So Check sends two statements. mysqlEnsureRow makes sure the row
	// exists (fence 0, below every token) and locks it, changing nothing
	// in an existing row. mysqlUpdate then decides: it raises the fence
	// and counts the acceptance in the same row, so an accepted check
	// always changes the row, and matches (and changes) 1 row when the
	// stored fence is not higher, 0 when it is, with or without
	// CLIENT_FOUND_ROWS. Its arguments are fence, resource, fence.
	mysqlEnsureRow = `INSERT INTO %[1]s (resource, fence) VALUES (?, 0)
ON DUPLICATE KEY UPDATE fence = fence`
	mysqlUpdate = `UPDATE %[1]s SET fence = ?, accepted = accepted + 1
WHERE resource = ? AND fence <= ?`

	// mysqlMaxResource is the longest resource name, in bytes, that
	// MySQLSchema's resource column holds.
	mysqlMaxResource = 255
)

// defaultTables are the Tables of DefaultTable, by dialect.
var defaultTables = func() map[Dialect]*Table {
	m := make(map[Dialect]*Table)
	for _, d := range []Dialect{Postgres, SQLite, MySQL} {
		t, err := NewTable(d, DefaultTable)
		if err != nil {
			panic(err)
		}
		m[d] = t
	}
	return m
}()

// defaultTable returns the Table of DefaultTable in dialect.
func defaultTable(d Dialect) (*Table, error) {
	t, ok := defaultTables[d]
	if !ok {
		return nil, fmt.Errorf("%w: unknown dialect %d", ErrInvalidArgument, int(d))
	}
	return t, nil
}
