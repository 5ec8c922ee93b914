// Command fencedpostgres shows a fenced write to PostgreSQL: a holder
// whose lock expired while it was paused cannot overwrite what the next
// holder wrote, because its transaction checks the lock's fencing token
// with fence.Check before it writes.
//
// It needs a PostgreSQL, named by LOCKSMITH_POSTGRES_URL or by the
// standard PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE, ...):
//
//	LOCKSMITH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/fencedpostgres
//
// (from the fence directory, a module of its own). It creates the tables
// fences and fenced_example_invoices if they do not exist. The lock lives
// in an embedded miniredis unless -redis names a real server.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/fence"
)

func main() {
	redisURL := flag.String("redis", "", "`URL` of a Redis server, such as redis://localhost:6379/0 (default: an embedded miniredis)")
	flag.Parse()
	dsn := os.Getenv("LOCKSMITH_POSTGRES_URL")
	if dsn == "" && !pgEnvSet() {
		fmt.Fprintln(os.Stderr, "fencedpostgres needs a PostgreSQL: set LOCKSMITH_POSTGRES_URL, such as\n"+
			"\tLOCKSMITH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/fencedpostgres\n"+
			"or the PG* variables (PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=test).")
		os.Exit(2)
	}
	if err := run(context.Background(), dsn, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "fencedpostgres:", err)
		os.Exit(1)
	}
}

// pgEnvSet reports whether a PG* variable names a server.
func pgEnvSet() bool {
	for _, v := range []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// writeInvoice is the whole pattern: in one transaction, check the lock's
// fence, then write, then commit. The check locks the fence row until the
// commit, so no newer holder can write in between.
func writeInvoice(ctx context.Context, db *sql.DB, lk *locksmith.Lock, status string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // does nothing after Commit
	if err := fence.Check(ctx, tx, fence.Postgres, lk.Key(), lk.Fence()); err != nil {
		return err // errors.Is(err, fence.ErrStaleFence): a newer holder has written
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO fenced_example_invoices (id, status) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status`, lk.Key(), status); err != nil {
		return err
	}
	return tx.Commit()
}

func run(ctx context.Context, dsn, redisURL string) error {
	db, err := sql.Open("pgx", dsn) // "" takes everything from the PG* variables
	if err != nil {
		return err
	}
	defer db.Close()
	// Once, at setup; a migration can run fence.PostgresSchema instead.
	if err := fence.CreateTable(ctx, db, fence.Postgres); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS fenced_example_invoices (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		return err
	}

	client, stop, err := connect(redisURL)
	if err != nil {
		return err
	}
	defer stop()
	locker := locksmith.New(client, locksmith.WithFencing())
	defer locker.Close()

	// The first holder takes the lock, and is paused (think of a long GC
	// pause) until its lock has expired.
	slow, err := locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(200*time.Millisecond))
	if err != nil {
		return err
	}
	fmt.Printf("slow holder: fence %d\n", slow.Fence())

	// The next holder waits for the lock, gets it once it has expired,
	// and writes.
	next, err := locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(10*time.Second),
		locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
	if err != nil {
		return err
	}
	defer next.Release(ctx)
	fmt.Printf("next holder: fence %d, writes: %v\n", next.Fence(), writeInvoice(ctx, db, next, "paid"))

	// The slow holder wakes up, believing it still holds the lock.
	err = writeInvoice(ctx, db, slow, "cancelled")
	fmt.Printf("slow holder writes: %v\n", err)
	if !errors.Is(err, fence.ErrStaleFence) {
		return fmt.Errorf("the stale write was not refused: %v", err)
	}

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM fenced_example_invoices WHERE id = 'invoice:7'`).Scan(&status); err != nil {
		return err
	}
	fmt.Printf("invoice:7 is %q\n", status)
	return nil
}

// connect returns a client of the Redis at redisURL, or of an embedded
// miniredis whose keys expire on the wall clock, and a function that
// closes both.
func connect(redisURL string) (*redis.Client, func(), error) {
	if redisURL != "" {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis: %w", err)
		}
		c := redis.NewClient(opts)
		return c, func() { _ = c.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, nil, err
	}
	m.ClockTTL(true)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { _ = c.Close(); m.Close() }, nil
}
