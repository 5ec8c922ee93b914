package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	_ "modernc.org/sqlite"

	"github.com/locksmith-go/locksmith/fence"
)

// A holder's write counts only if no higher fence has been seen for the
// resource: here the fences are given by hand, where a program would pass
// lk.Fence() of a lock obtained with locksmith.WithFencing. The database
// is SQLite in memory, so the example runs anywhere; with PostgreSQL, use
// fence.Postgres and the same calls.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // each connection to :memory: is a database of its own

	// Once, at setup (or run fence.SQLiteSchema in a migration).
	if err := fence.CreateTable(ctx, db, fence.SQLite); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (id TEXT PRIMARY KEY, status TEXT)`); err != nil {
		log.Fatal(err)
	}

	// write sets the invoice's status, if fence is still the newest.
	write := func(fenceToken int64, status string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, does nothing
		if err := fence.Check(ctx, tx, fence.SQLite, "invoice:7", fenceToken); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO invoices (id, status) VALUES ('invoice:7', ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status`, status); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println("holder 1:", write(1001, "draft"))
	fmt.Println("holder 2:", write(1002, "paid"))
	fmt.Println("holder 2 again:", write(1002, "paid, receipt sent"))
	err = write(1001, "cancelled") // holder 1 woke up from a long pause
	fmt.Println("holder 1, late:", errors.Is(err, fence.ErrStaleFence))
	fmt.Println(err)
	fmt.Println("without fencing:", errors.Is(write(0, "void"), fence.ErrInvalidArgument))

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM invoices WHERE id = 'invoice:7'`).Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", status)
	// Output:
	// holder 1: <nil>
	// holder 2: <nil>
	// holder 2 again: <nil>
	// holder 1, late: true
	// fence: stale fencing token: "invoice:7" at fence 1001: a higher fence has been seen for it
	// without fencing: true
	// status: paid, receipt sent
}

// A fence table of another name, here in the schema billing, and the
// statement for the migration that creates it.
func ExampleNewTable() {
	fences, err := fence.NewTable(fence.Postgres, "billing.fences")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fences.Schema())

	_, err = fence.NewTable(fence.Postgres, "fences; DROP TABLE invoices")
	fmt.Println(errors.Is(err, fence.ErrInvalidArgument))
	// Output:
	// CREATE TABLE IF NOT EXISTS billing.fences (
	// 	resource TEXT PRIMARY KEY,
	// 	fence    BIGINT NOT NULL
	// )
	// true
}
