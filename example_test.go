package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// exampleRedis starts an in-memory Redis for the examples and returns a
// client of it, and a function that closes both. Real code connects to a
// real server instead:
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	defer client.Close()
func exampleRedis() (client *redis.Client, stop func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	m.ClockTTL(true) // keys expire as the wall clock runs, as on a real Redis
	client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return client, func() {
		_ = client.Close()
		m.Close()
	}
}

func ExampleNew() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// One Locker serves the whole process. Its options are the defaults of
	// every call; a call may override them.
	locker := locksmith.New(client,
		locksmith.WithPrefix("myapp:lock:"),
		locksmith.WithTTL(30*time.Second),
	)
	defer locker.Close()

	lk, err := locker.Obtain(ctx, "nightly-report")
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	n, _ := client.Exists(ctx, "myapp:lock:nightly-report").Result()
	fmt.Println("stored at myapp:lock:nightly-report:", n == 1)
	if err := lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}

	// New never fails: a bad option is reported by every call instead,
	// before anything is sent to Redis.
	bad := locksmith.New(client, locksmith.WithTTL(time.Microsecond))
	defer bad.Close()
	_, err = bad.Obtain(ctx, "nightly-report")
	fmt.Println("invalid argument:", errors.Is(err, locksmith.ErrInvalidArgument))
	// Output:
	// stored at myapp:lock:nightly-report: true
	// invalid argument: true
}

func ExampleLocker_Obtain() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	lk, err := locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	defer func() {
		if err := lk.Release(ctx); err != nil {
			fmt.Println("release:", err)
		}
	}()

	fmt.Println("key:", lk.Key())
	ttl, err := lk.TTL(ctx)
	fmt.Println("held:", err == nil, "ttl > 0:", ttl > 0)
	_, err = locker.Obtain(ctx, "invoice:7")
	fmt.Println("second obtain refused:", errors.Is(err, locksmith.ErrNotObtained))
	// Output:
	// key: invoice:7
	// held: true ttl > 0: true
	// second obtain refused: true
}

func ExampleLocker_WithLock() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	err := locker.WithLock(ctx, "cache:rebuild", func(ctx context.Context) error {
		// ctx is a lease: the lock is renewed while fn runs, and ctx is
		// cancelled if the lock is lost.
		fmt.Println("rebuilding under", locksmith.LockFromContext(ctx).Key())
		return nil
	})
	fmt.Println("err:", err)

	n, _ := client.Exists(ctx, "cache:rebuild").Result()
	fmt.Println("released:", n == 0)
	// Output:
	// rebuilding under cache:rebuild
	// err: <nil>
	// released: true
}

// Try once when another worker may do the job instead; wait when the job
// must be done by this one.
func Example_tryOnceVersusWait() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	holder, err := locker.Obtain(ctx, "report")
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}

	// The default, NoRetry, fails at once while the lock is held.
	_, err = locker.Obtain(ctx, "report")
	if errors.Is(err, locksmith.ErrNotObtained) {
		fmt.Println("try once: held by someone else")
	}

	// A waiter retries every 10ms, at most 100 times (about a second).
	// ExponentialBackoff(10*time.Millisecond, time.Second) spreads many
	// waiters out instead.
	type result struct {
		lk  *locksmith.Lock
		err error
	}
	waited := make(chan result, 1)
	go func() {
		lk, err := locker.Obtain(ctx, "report",
			locksmith.WithRetry(locksmith.LimitRetry(locksmith.LinearBackoff(10*time.Millisecond), 100)))
		waited <- result{lk, err}
	}()

	time.Sleep(50 * time.Millisecond) // the holder works a little longer
	fmt.Println("holder: releasing")
	if err := holder.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}

	r := <-waited
	if r.err != nil {
		fmt.Println("waiter:", r.err)
		return
	}
	fmt.Println("waiter: obtained", r.lk.Key())
	if err := r.lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output:
	// try once: held by someone else
	// holder: releasing
	// waiter: obtained report
}

// One lock per resource: orders are processed in parallel, but each order
// by one worker at a time.
func Example_perResource() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithPrefix("locks:"))
	defer locker.Close()
	orderKey := func(id int) string { return fmt.Sprintf("order:%d", id) }

	a, err := locker.Obtain(ctx, orderKey(42))
	fmt.Println("order 42 locked:", err == nil)
	b, err := locker.Obtain(ctx, orderKey(43))
	fmt.Println("order 43 locked:", err == nil)

	_, err = locker.Obtain(ctx, orderKey(42))
	fmt.Println("order 42 again refused:", errors.Is(err, locksmith.ErrNotObtained))

	for _, lk := range []*locksmith.Lock{a, b} {
		if lk == nil {
			continue
		}
		if err := lk.Release(ctx); err != nil {
			fmt.Println("release:", err)
		}
	}
	// Output:
	// order 42 locked: true
	// order 43 locked: true
	// order 42 again refused: true
}

// A short TTL limits how long a crashed holder blocks others; a lease
// keeps the lock alive for as long as the work actually runs.
func ExampleLock_Lease() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	lk, err := locker.Obtain(ctx, "import", locksmith.WithTTL(300*time.Millisecond))
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	lctx := lk.Lease(ctx) // renews every 100ms, a third of the TTL

	// About a second of work, more than three TTLs, in steps that each
	// check whether the lock is still held.
	for range 10 {
		select {
		case <-lctx.Done():
			fmt.Println("lock lost:", context.Cause(lctx))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	ttl, err := lk.TTL(ctx)
	fmt.Println("after 1s: held:", err == nil, "ttl > 0:", ttl > 0, "lease err:", lctx.Err())

	if err := lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	<-lctx.Done() // Release ends the lease
	cause := context.Cause(lctx)
	fmt.Println("after release:", cause)
	fmt.Println("lost:", errors.Is(cause, locksmith.ErrLockLost))
	// Output:
	// after 1s: held: true ttl > 0: true lease err: <nil>
	// after release: context canceled
	// lost: false
}

// When the lock is lost, the lease context ends with a cause matching
// ErrLockLost, and the work must stop.
func Example_lockLost() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	lk, err := locker.Obtain(ctx, "job", locksmith.WithRenewInterval(20*time.Millisecond))
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	lctx := lk.Lease(ctx)

	// Someone deletes the key from outside (an operator, a FLUSHALL, a
	// failover that lost it). The next renewal notices.
	client.Del(ctx, "job")

	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		fmt.Println("still leased")
	}
	fmt.Println("lost:", errors.Is(context.Cause(lctx), locksmith.ErrLockLost))

	// Release touches nothing that is not its own.
	err = lk.Release(ctx)
	fmt.Println("release: not held:", errors.Is(err, locksmith.ErrNotHeld))
	// Output:
	// lost: true
	// release: not held: true
}

// When Redis cannot answer, nobody knows who holds the lock. The error
// does not match ErrNotObtained, so code that skips the job when another
// worker runs it does not mistake an outage for "someone else has it".
func Example_failClosed() {
	client := redis.NewClient(&redis.Options{
		Addr:          unreachableAddr(),
		MaxRetries:    -1, // fail fast: no retries, a single dial attempt
		DialerRetries: 1,
	})
	defer client.Close()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	lk, err := locker.Obtain(ctx, "billing-run")
	switch {
	case err == nil:
		fmt.Println("obtained: run the job")
		_ = lk.Release(ctx)
	case errors.Is(err, locksmith.ErrNotObtained):
		fmt.Println("another worker runs the job: skip it")
	default:
		fmt.Println("cannot tell who holds the lock: do not run the job, retry later")
	}
	// Output:
	// cannot tell who holds the lock: do not run the job, retry later
}

// unreachableAddr returns a loopback address nothing listens on: Redis is
// down.
func unreachableAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// A job stuck in a loop would keep its lock for ever, its lease renewing
// it; WithMaxHold caps the hold. At the cap the job's context ends with
// ErrMaxHold (which also matches ErrLockLost), and WithLock releases the
// lock as soon as the job returns.
func ExampleWithMaxHold() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithTTL(time.Second))
	defer locker.Close()

	err := locker.WithLock(ctx, "reindex", func(ctx context.Context) error {
		<-ctx.Done() // a job that only stops when told to
		return context.Cause(ctx)
	}, locksmith.WithMaxHold(100*time.Millisecond))
	fmt.Println("capped:", errors.Is(err, locksmith.ErrMaxHold))
	fmt.Println("counts as lost:", errors.Is(err, locksmith.ErrLockLost))
	n, _ := client.Exists(ctx, "reindex").Result()
	fmt.Println("still held:", n == 1)
	// Output:
	// capped: true
	// counts as lost: true
	// still held: false
}
