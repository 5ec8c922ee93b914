package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/fence"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// countingExecer counts the statements it is given, and runs none.
type countingExecer struct{ n atomic.Int64 }

func (c *countingExecer) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	c.n.Add(1)
	return nil, errors.New("countingExecer runs nothing")
}

func TestCheckRefusesBadArgumentsBeforeSQL(t *testing.T) {
	long := strings.Repeat("x", 256)
	db, err := sql.Open("sqlite", ":memory:") // never used: Check refuses a *sql.DB
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		name     string
		ex       fence.Execer // nil: a countingExecer
		dialect  fence.Dialect
		resource string
		fence    int64
		want     string // in the error
	}{
		{"zero fence", nil, fence.Postgres, "invoice:7", 0, "WithFencing"},
		{"negative fence", nil, fence.SQLite, "invoice:7", -3, "fence -3"},
		{"empty resource", nil, fence.Postgres, "", 5, "empty resource"},
		{"resource too long for MySQL", nil, fence.MySQL, long, 5, "256 bytes"},
		{"unknown dialect", nil, fence.Dialect(0), "invoice:7", 5, "unknown dialect"},
		{"a *sql.DB", db, fence.Postgres, "invoice:7", 5, "*sql.DB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			counter := &countingExecer{}
			ex := c.ex
			if ex == nil {
				ex = counter
			}
			err := fence.Check(t.Context(), ex, c.dialect, c.resource, c.fence)
			if !errors.Is(err, fence.ErrInvalidArgument) {
				t.Fatalf("got %v, want an error matching ErrInvalidArgument", err)
			}
			if errors.Is(err, fence.ErrStaleFence) {
				t.Errorf("%v matches ErrStaleFence", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q, want it to mention %q", err, c.want)
			}
			if n := counter.n.Load(); n != 0 {
				t.Errorf("%d statements sent, want none", n)
			}
		})
	}
	if err := fence.Check(t.Context(), nil, fence.Postgres, "invoice:7", 5); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("nil Execer: got %v, want ErrInvalidArgument", err)
	}
}

func TestNewTableNames(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"fences", true},
		{"app_fences2", true},
		{"app.fences", true},
		{"_x", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"2fences", false},
		{"a.b.c", false},
		{"fences; DROP TABLE users", false},
		{`"fences"`, false},
		{"fen-ces", false},
		{"fences ", false},
		{"fencés", false},
	}
	for _, c := range cases {
		for _, d := range []fence.Dialect{fence.Postgres, fence.SQLite, fence.MySQL} {
			tbl, err := fence.NewTable(d, c.name)
			if c.ok != (err == nil) {
				t.Errorf("NewTable(%v, %q): got error %v, want ok %v", d, c.name, err, c.ok)
				continue
			}
			if err != nil {
				if !errors.Is(err, fence.ErrInvalidArgument) {
					t.Errorf("NewTable(%v, %q): %v does not match ErrInvalidArgument", d, c.name, err)
				}
				continue
			}
			if tbl.Name() != c.name || tbl.Dialect() != d || !strings.Contains(tbl.Schema(), " "+c.name+" (") {
				t.Errorf("NewTable(%v, %q): name %q, dialect %v, schema %q", d, c.name, tbl.Name(), tbl.Dialect(), tbl.Schema())
			}
		}
	}
	if _, err := fence.NewTable(fence.Dialect(9), "fences"); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("unknown dialect: got %v, want ErrInvalidArgument", err)
	}
}

func TestSchemaConstants(t *testing.T) {
	for d, want := range map[fence.Dialect]string{
		fence.Postgres: fence.PostgresSchema,
		fence.SQLite:   fence.SQLiteSchema,
		fence.MySQL:    fence.MySQLSchema,
	} {
		tbl, err := fence.NewTable(d, fence.DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		if got := tbl.Schema(); got != want {
			t.Errorf("%v: Schema() of %q is\n%s\nwant the exported constant\n%s", d, fence.DefaultTable, got, want)
		}
	}
}

// tx runs fn in a transaction of b, committing if it returns nil and
// rolling back otherwise, and returns fn's error or the commit's.
func (b backend) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// checkIn runs tbl.Check in a transaction of its own, committed when it
// succeeds.
func (b backend) checkIn(ctx context.Context, tbl *fence.Table, resource string, f int64) error {
	return b.tx(ctx, func(tx *sql.Tx) error { return tbl.Check(ctx, tx, resource, f) })
}

func TestCheckSequence(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		names := []string{fence.DefaultTable, "custom_fences"}
		if b.dialect == fence.Postgres {
			// A schema-qualified name: the test's own schema.
			var schema string
			if err := b.db.QueryRowContext(t.Context(), "SELECT current_schema()").Scan(&schema); err != nil {
				t.Fatal(err)
			}
			names = append(names, schema+".qualified_fences")
		}
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				tbl, err := fence.NewTable(b.dialect, name)
				if err != nil {
					t.Fatal(err)
				}
				if err := tbl.Create(t.Context(), b.db); err != nil {
					t.Fatal(err)
				}
				if err := tbl.Create(t.Context(), b.db); err != nil {
					t.Fatalf("second Create: %v", err)
				}
				steps := []struct {
					resource string
					fence    int64
					stale    bool
				}{
					{"invoice:7", 5, false},  // the first check inserts the row
					{"invoice:7", 5, false},  // equal: the same holder writes again
					{"invoice:7", 7, false},  // a newer holder
					{"invoice:7", 6, true},   // an older one, late
					{"invoice:7", 5, true},   // older still
					{"invoice:7", 7, false},  // the newest, once more
					{"invoice:8", 1, false},  // another resource has its own fence
					{"invoice:8", 1, false},  //
					{"Invoice:7", 2, false},  // names are compared exactly
					{"invoice:7 ", 2, false}, // trailing spaces count
				}
				for i, s := range steps {
					err := b.checkIn(t.Context(), tbl, s.resource, s.fence)
					switch {
					case s.stale && !errors.Is(err, fence.ErrStaleFence):
						t.Fatalf("step %d: Check(%q, %d): got %v, want ErrStaleFence", i, s.resource, s.fence, err)
					case s.stale:
						for _, want := range []string{strconv.Quote(s.resource), strconv.FormatInt(s.fence, 10), "higher fence"} {
							if !strings.Contains(err.Error(), want) {
								t.Errorf("step %d: error %q does not mention %s", i, err, want)
							}
						}
					case err != nil:
						t.Fatalf("step %d: Check(%q, %d): %v", i, s.resource, s.fence, err)
					}
				}
				for resource, want := range map[string]int64{"invoice:7": 7, "invoice:8": 1, "Invoice:7": 2, "invoice:7 ": 2} {
					if got := b.storedFence(t, name, resource); got != want {
						t.Errorf("stored fence of %q: got %d, want %d", resource, got, want)
					}
				}
			})
		}
	})
}

func TestRollbackLeavesFence(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		if err := fence.CreateTable(ctx, b.db, b.dialect); err != nil {
			t.Fatal(err)
		}
		b.exec(t, "CREATE TABLE notes (id "+b.serial+", fence BIGINT NOT NULL)")
		write := func(f int64, commit bool) error {
			tx, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fence.Check(ctx, tx, b.dialect, "report", f); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, b.q("INSERT INTO notes (fence) VALUES (?)"), f); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback()
			}
			return tx.Commit()
		}
		if err := write(5, true); err != nil {
			t.Fatal(err)
		}
		if err := write(9, false); err != nil { // accepted, then rolled back
			t.Fatal(err)
		}
		if got := b.storedFence(t, fence.DefaultTable, "report"); got != 5 {
			t.Errorf("after the rollback the stored fence is %d, want 5", got)
		}
		// 7 < 9 would be refused had the rolled-back check stayed.
		if err := write(7, true); err != nil {
			t.Fatalf("a fence above the committed one but below the rolled-back one: %v", err)
		}
		var notes []int64
		rows, err := b.db.QueryContext(ctx, "SELECT fence FROM notes ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var f int64
			if err := rows.Scan(&f); err != nil {
				t.Fatal(err)
			}
			notes = append(notes, f)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if want := []int64{5, 7}; !slices.Equal(notes, want) {
			t.Errorf("notes written: %v, want %v", notes, want)
		}
	})
}

// invoices is the resource of the tests with a lock: one invoice whose
// status each holder sets, and an audit log with a row per committed
// write, in commit order (its id is taken after the fence check, while
// the transaction holds the fence row).
func (b backend) createInvoices(t *testing.T) {
	t.Helper()
	if err := fence.CreateTable(t.Context(), b.db, b.dialect); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "CREATE TABLE invoices (id "+b.text+" PRIMARY KEY, status "+b.text+" NOT NULL, fence BIGINT NOT NULL)")
	b.exec(t, "CREATE TABLE audit (id "+b.serial+", invoice "+b.text+" NOT NULL, status "+b.text+" NOT NULL, fence BIGINT NOT NULL)")
	b.exec(t, "INSERT INTO invoices (id, status, fence) VALUES ('invoice:7', 'new', 0)")
}

// writeInvoice is the pattern the package is for: in one transaction,
// check the fence, then write; commit.
func (b backend) writeInvoice(ctx context.Context, f int64, status string) error {
	return b.tx(ctx, func(tx *sql.Tx) error {
		if err := fence.Check(ctx, tx, b.dialect, "invoice:7", f); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, b.q("UPDATE invoices SET status = ?, fence = ? WHERE id = 'invoice:7'"), status, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, b.q("INSERT INTO audit (invoice, status, fence) VALUES ('invoice:7', ?, ?)"), status, f)
		return err
	})
}

// invoice returns the invoice's status and fence.
func (b backend) invoice(t *testing.T) (string, int64) {
	t.Helper()
	var status string
	var f int64
	if err := b.db.QueryRowContext(t.Context(), "SELECT status, fence FROM invoices WHERE id = 'invoice:7'").Scan(&status, &f); err != nil {
		t.Fatal(err)
	}
	return status, f
}

// audit returns the audit log, in commit order.
func (b backend) audit(t *testing.T) (statuses []string, fences []int64) {
	t.Helper()
	rows, err := b.db.QueryContext(t.Context(), "SELECT status, fence FROM audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var f int64
		if err := rows.Scan(&s, &f); err != nil {
			t.Fatal(err)
		}
		statuses, fences = append(statuses, s), append(fences, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return statuses, fences
}

// pauseHook freezes a client while paused, as a stopped process is
// frozen: every command it would send waits until resume is closed.
type pauseHook struct {
	paused atomic.Bool
	resume chan struct{}
}

func (h *pauseHook) wait(ctx context.Context) error {
	if !h.paused.Load() {
		return nil
	}
	select {
	case <-h.resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *pauseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pauseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *pauseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

func TestPausedHolderIsFencedOff(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		b.createInvoices(t)
		srv := redistest.New(t)
		pause := &pauseHook{resume: make(chan struct{})}
		slowLocker := fencingLocker(t, newClient(t, srv, pause))
		nextLocker := fencingLocker(t, newClient(t, srv))
		const ttl = 300 * time.Millisecond

		// The slow holder holds the lock under a lease, then freezes (its
		// lease's renewals with it) before it writes.
		type result struct {
			fence    int64
			writeErr error // its late write
			err      error // WithLock's
		}
		paused := make(chan int64, 1)
		done := make(chan result, 1)
		go func() {
			var r result
			r.err = slowLocker.WithLock(ctx, "invoice:7", func(ctx context.Context) error {
				r.fence = locksmith.LockFromContext(ctx).Fence()
				pause.paused.Store(true)
				paused <- r.fence
				<-pause.resume
				r.writeErr = b.writeInvoice(context.Background(), r.fence, "unpaid")
				return r.writeErr
			}, locksmith.WithTTL(ttl))
			done <- r
		}()
		slowFence := <-paused

		// The next holder waits until Redis lets the slow one's lock
		// expire, and writes.
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		next, err := nextLocker.Obtain(waitCtx, "invoice:7", locksmith.WithTTL(10*time.Second),
			locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		if err != nil {
			t.Fatalf("the next holder: %v", err)
		}
		if holder, err := srv.Client(t).Get(ctx, "invoice:7").Result(); err != nil || holder != next.Token() {
			t.Fatalf("Redis has %q (%v) as the holder, want the next holder's token", holder, err)
		}
		if next.Fence() <= slowFence {
			t.Fatalf("the next holder's fence %d is not above the slow one's %d", next.Fence(), slowFence)
		}
		if err := b.writeInvoice(ctx, next.Fence(), "paid"); err != nil {
			t.Fatalf("the next holder's write: %v", err)
		}

		// The slow holder wakes up and writes with its old fence.
		close(pause.resume)
		r := <-done
		if !errors.Is(r.writeErr, fence.ErrStaleFence) {
			t.Errorf("the slow holder's late write: got %v, want ErrStaleFence", r.writeErr)
		}
		if !errors.Is(r.err, fence.ErrStaleFence) && !errors.Is(r.err, locksmith.ErrLockLost) {
			t.Errorf("the slow holder's WithLock: got %v", r.err)
		}
		if status, f := b.invoice(t); status != "paid" || f != next.Fence() {
			t.Errorf("invoice: %q at fence %d, want \"paid\" at %d", status, f, next.Fence())
		}
		if statuses, fences := b.audit(t); !slices.Equal(statuses, []string{"paid"}) || !slices.Equal(fences, []int64{next.Fence()}) {
			t.Errorf("audit log: %v at fences %v, want only the next holder's write", statuses, fences)
		}
		if err := next.Release(ctx); err != nil {
			t.Error(err)
		}
		t.Logf("slow holder's fence %d, next holder's %d; the late write: %v", slowFence, next.Fence(), r.writeErr)
	})
}

// writers is how many writers race in TestConcurrentWriters, each round.
const writers, rounds = 40, 3

func TestConcurrentWriters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		b.createInvoices(t)
		b.db.SetMaxOpenConns(writers + 2)
		b.db.SetMaxIdleConns(writers + 2)
		locker := fencingLocker(t, redistest.Shared(t).Client(t))
		key := uniqueIdent("lock", t)

		var allCommitted, allRefused int
		highest := int64(0) // the highest fence committed in earlier rounds
		for round := range rounds {
			// Real fences: one acquisition after another, each released.
			fences := make([]int64, writers)
			for i := range fences {
				lk, err := locker.Obtain(ctx, key, locksmith.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				fences[i] = lk.Fence()
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			top := fences[len(fences)-1]
			rand.Shuffle(len(fences), func(i, j int) { fences[i], fences[j] = fences[j], fences[i] })

			// Every writer, released at once, writes with its fence.
			start := make(chan struct{})
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i, f := range fences {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = b.writeInvoice(ctx, f, "round "+strconv.Itoa(round))
				}()
			}
			close(start)
			wg.Wait()

			accepted := make(map[int64]bool)
			var refused []int64
			for i, err := range errs {
				switch {
				case err == nil:
					accepted[fences[i]] = true
				case errors.Is(err, fence.ErrStaleFence):
					refused = append(refused, fences[i])
				default:
					t.Fatalf("writer with fence %d: %v", fences[i], err)
				}
			}
			_, logged := b.audit(t)
			var committed []int64
			for _, f := range logged {
				if f > highest { // this round's
					committed = append(committed, f)
				}
			}
			// In commit order, each committed write's fence is above every
			// earlier one: no write landed after a higher fence's.
			for i := 1; i < len(committed); i++ {
				if committed[i] <= committed[i-1] {
					t.Fatalf("round %d: committed fences in commit order %v: %d after %d", round, committed, committed[i], committed[i-1])
				}
			}
			// The committed writes are exactly the accepted ones.
			if len(committed) != len(accepted) {
				t.Fatalf("round %d: %d writes committed (%v), %d accepted", round, len(committed), committed, len(accepted))
			}
			for _, f := range committed {
				if !accepted[f] {
					t.Fatalf("round %d: fence %d committed but its writer was refused", round, f)
				}
			}
			// A refusal means a higher fence had committed by then: every
			// refused fence is below the last committed one.
			for _, f := range refused {
				if f >= committed[len(committed)-1] {
					t.Fatalf("round %d: fence %d refused, but no higher one committed (%v)", round, f, committed)
				}
			}
			// The highest fence cannot be refused, and its write is the
			// last one, the one visible.
			if committed[len(committed)-1] != top {
				t.Fatalf("round %d: the last committed fence is %d, want the highest, %d", round, committed[len(committed)-1], top)
			}
			if status, f := b.invoice(t); f != top || status != "round "+strconv.Itoa(round) {
				t.Fatalf("round %d: invoice %q at fence %d, want the highest fence %d", round, status, f, top)
			}
			if got := b.storedFence(t, fence.DefaultTable, "invoice:7"); got != top {
				t.Fatalf("round %d: stored fence %d, want %d", round, got, top)
			}
			allCommitted += len(committed)
			allRefused += len(refused)
			highest = top
		}
		t.Logf("%v: %d rounds of %d concurrent writers: %d writes committed, each above the one before, %d refused with ErrStaleFence",
			b.dialect, rounds, writers, allCommitted, allRefused)
	})
}

func TestFenceSurvivesRedisRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		b.createInvoices(t)
		srv := redistest.New(t) // no persistence: a restart forgets everything
		client := newClient(t, srv)
		locker := fencingLocker(t, client)

		old, err := locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.writeInvoice(ctx, old.Fence(), "draft"); err != nil {
			t.Fatalf("the old holder's first write: %v", err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		// The restarted Redis has forgotten the lock and its fence
		// counter: the new holder gets the lock at once.
		var next *locksmith.Lock
		deadline := time.Now().Add(10 * time.Second)
		for next == nil {
			next, err = locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(time.Minute))
			if err != nil {
				if time.Now().After(deadline) {
					t.Fatalf("obtain after the restart: %v", err)
				}
				time.Sleep(10 * time.Millisecond) // go-redis reconnecting
			}
		}
		if next.Fence() <= old.Fence() {
			t.Fatalf("after the restart the fence is %d, not above the old holder's %d", next.Fence(), old.Fence())
		}
		if err := b.writeInvoice(ctx, next.Fence(), "paid"); err != nil {
			t.Fatalf("the new holder's write: %v", err)
		}
		// The old holder still believes it holds the lock (its Deadline
		// is a minute away) and writes again.
		if err := b.writeInvoice(ctx, old.Fence(), "unpaid"); !errors.Is(err, fence.ErrStaleFence) {
			t.Fatalf("the old holder's write after the restart: got %v, want ErrStaleFence", err)
		}
		if status, f := b.invoice(t); status != "paid" || f != next.Fence() {
			t.Errorf("invoice: %q at fence %d, want \"paid\" at %d", status, f, next.Fence())
		}
		if statuses, _ := b.audit(t); !slices.Equal(statuses, []string{"draft", "paid"}) {
			t.Errorf("audit log %v, want [draft paid]", statuses)
		}
		if err := old.Release(ctx); !errors.Is(err, locksmith.ErrNotHeld) {
			t.Errorf("the old holder's release: got %v, want ErrNotHeld", err)
		}
		if err := next.Release(ctx); err != nil {
			t.Error(err)
		}
		t.Logf("fence before the restart %d, after %d", old.Fence(), next.Fence())
	})
}

// waitSomeoneWaits waits until the server shows a session waiting for a
// row lock, or fails t after 10s. SQLite shows nothing: it returns at once.
func (b backend) waitSomeoneWaits(t *testing.T) {
	t.Helper()
	var query string
	switch b.dialect {
	case fence.Postgres:
		query = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
	case fence.MySQL:
		query = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
	default:
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := b.db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waits for a row lock after 10s")
		}
		time.Sleep(150 * time.Millisecond) // see waitLockWait for MySQL's 100ms
	}
}

// TestHolderPausedInsideTransaction is the other place a holder can be
// paused: after its Check passed, inside its open transaction. Its check
// holds the fence row, so the next holder's write waits for the paused
// transaction to end; the paused holder's writes then commit first, in
// fence order, and the next holder's overwrite them.
func TestHolderPausedInsideTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		b.createInvoices(t)
		srv := redistest.New(t)
		pause := &pauseHook{resume: make(chan struct{})}
		slowLocker := fencingLocker(t, newClient(t, srv, pause))
		nextLocker := fencingLocker(t, newClient(t, srv))

		paused := make(chan int64, 1)
		slowDone := make(chan error, 1)
		go func() {
			var writeErr error
			_ = slowLocker.WithLock(ctx, "invoice:7", func(ctx context.Context) error {
				f := locksmith.LockFromContext(ctx).Fence()
				writeErr = b.tx(context.Background(), func(tx *sql.Tx) error {
					if err := fence.Check(ctx, tx, b.dialect, "invoice:7", f); err != nil {
						return err
					}
					pause.paused.Store(true)
					paused <- f
					<-pause.resume // frozen inside the transaction, past the lock's TTL
					if _, err := tx.Exec(b.q("UPDATE invoices SET status = ?, fence = ? WHERE id = 'invoice:7'"), "draft", f); err != nil {
						return err
					}
					_, err := tx.Exec(b.q("INSERT INTO audit (invoice, status, fence) VALUES ('invoice:7', ?, ?)"), "draft", f)
					return err
				})
				return writeErr
			}, locksmith.WithTTL(300*time.Millisecond))
			slowDone <- writeErr
		}()
		slowFence := <-paused

		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		next, err := nextLocker.Obtain(waitCtx, "invoice:7", locksmith.WithTTL(10*time.Second),
			locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		if err != nil {
			t.Fatalf("the next holder: %v", err)
		}
		defer next.Release(ctx)
		nextDone := make(chan error, 1)
		go func() { nextDone <- b.writeInvoice(ctx, next.Fence(), "paid") }()
		b.waitSomeoneWaits(t)
		select {
		case err := <-nextDone:
			// (On SQLite the next holder's BEGIN IMMEDIATE is what waits.)
			t.Fatalf("the next holder's write ended (%v) while the paused transaction was open", err)
		default:
		}

		close(pause.resume)
		if err := <-slowDone; err != nil {
			t.Fatalf("the paused holder's transaction, checked before the next holder's: %v", err)
		}
		if err := <-nextDone; err != nil {
			t.Fatalf("the next holder's write: %v", err)
		}
		if status, f := b.invoice(t); status != "paid" || f != next.Fence() {
			t.Errorf("invoice: %q at fence %d, want \"paid\" at %d", status, f, next.Fence())
		}
		if statuses, fences := b.audit(t); !slices.Equal(statuses, []string{"draft", "paid"}) || !slices.Equal(fences, []int64{slowFence, next.Fence()}) {
			t.Errorf("audit log %v at fences %v, want the paused holder's write, then the next holder's", statuses, fences)
		}
	})
}
