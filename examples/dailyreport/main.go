// Command dailyreport shows the most common use of locksmith: every server
// runs the same scheduler, the scheduler fires the same daily job on all of
// them at the same moment, and the job must run on only one.
//
// Five servers are simulated by goroutines. Each has its own Redis client and
// its own Locker, so they share nothing but Redis, as separate processes
// would. Each calls WithLock with the default retry strategy, NoRetry: it
// tries once, and if another server holds the lock it skips the job rather
// than running it late. A Redis failure is not taken as permission: the
// server reports it and does not run the job (fail closed).
//
// The job takes 1s while the lock's TTL is only 300ms, so the lock would
// expire three times over without the lease that WithLock keeps renewing in
// the background; the job prints the lock's remaining TTL as it goes to show
// that it stays up.
//
// By default it runs against an embedded miniredis, so no Redis is needed:
//
//	go run ./examples/dailyreport
//
// To use a real server instead:
//
//	go run ./examples/dailyreport -redis redis://localhost:6379/0
//
// It exits with status 1 unless the job ran exactly once and the lock key is
// gone at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/locksmith-go/locksmith"
	"github.com/redis/go-redis/v9"
)

const (
	servers = 5
	jobKey  = "report:2026-11-30"
	lockTTL = 300 * time.Millisecond

	// The job runs in steps and reports the lock's TTL after each one.
	jobSteps = 4
	jobStep  = 250 * time.Millisecond
)

func main() {
	redisURL := flag.String("redis", "", "`URL` of a Redis server, such as redis://localhost:6379/0 (default: an embedded miniredis)")
	prefix := flag.String("prefix", "locksmith:", "prefix of the lock key in Redis")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *redisURL, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "dailyreport:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, redisURL, prefix string) error {
	newClient, closeServer, err := connect(redisURL)
	if err != nil {
		return err
	}
	defer closeServer()

	// admin looks at Redis directly, as an operator would.
	admin := newClient()
	defer admin.Close()
	rkey := prefix + jobKey
	if n, err := admin.Exists(ctx, rkey).Result(); err != nil {
		return fmt.Errorf("redis: %w", err)
	} else if n != 0 {
		return fmt.Errorf("lock key %q already exists: another run holds it, or it was left behind", rkey)
	}

	fmt.Printf("%d servers fire job %q at once (lock TTL %v, job takes %v)\n",
		servers, jobKey, lockTTL, jobSteps*jobStep)

	var (
		ran   atomic.Int32
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for id := 1; id <= servers; id++ {
		client := newClient()
		defer client.Close()
		// Connect before the start signal, so that all five attempts
		// reach Redis within the same few milliseconds.
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("server %d: redis: %w", id, err)
		}
		locker := locksmith.New(client, locksmith.WithPrefix(prefix))
		defer locker.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			runScheduledJob(ctx, id, locker, &ran)
		}()
	}
	close(start)
	wg.Wait()

	n, err := admin.Exists(ctx, rkey).Result()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if n == 0 {
		fmt.Printf("lock key %q is gone (EXISTS = 0)\n", rkey)
	} else {
		fmt.Printf("lock key %q is still there (EXISTS = %d)\n", rkey, n)
	}
	fmt.Printf("ran on %d of %d servers\n", ran.Load(), servers)

	switch {
	case ran.Load() != 1:
		return fmt.Errorf("the job ran %d times, want exactly once", ran.Load())
	case n != 0:
		return fmt.Errorf("the lock key %q was not released", rkey)
	}
	return nil
}

// connect returns a function that makes a new client, one per simulated
// server, and a function that stops the embedded server, if any.
func connect(redisURL string) (newClient func() *redis.Client, closeServer func(), err error) {
	if redisURL != "" {
		if _, err := redis.ParseURL(redisURL); err != nil {
			return nil, nil, fmt.Errorf("-redis: %w", err)
		}
		newClient = func() *redis.Client {
			opts, _ := redis.ParseURL(redisURL) // checked above
			return redis.NewClient(opts)
		}
		return newClient, func() {}, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, nil, fmt.Errorf("starting miniredis: %w", err)
	}
	// Let keys expire on the wall clock, as in a real Redis; by default
	// miniredis only expires them when told to.
	m.ClockTTL(true)
	newClient = func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: m.Addr()})
	}
	return newClient, m.Close, nil
}

// runScheduledJob is what the scheduler on server id runs when the job
// fires: try once to take the lock, and run the job only if that worked.
func runScheduledJob(ctx context.Context, id int, locker *locksmith.Locker, ran *atomic.Int32) {
	name := fmt.Sprintf("server %d", id)
	err := locker.WithLock(ctx, jobKey, func(ctx context.Context) error {
		ran.Add(1)
		fmt.Printf("%s: got the lock, running the job\n", name)
		return buildReport(ctx, name)
	}, locksmith.WithTTL(lockTTL))

	switch {
	case err == nil:
		fmt.Printf("%s: job done, lock released\n", name)
	case errors.Is(err, locksmith.ErrNotObtained):
		fmt.Printf("%s: skipped, the lock is held elsewhere\n", name)
	case errors.Is(err, locksmith.ErrLockLost):
		fmt.Printf("%s: lost the lock, job stopped: %v\n", name, err)
	default:
		// Redis could not say whether anyone holds the lock. Running the
		// job anyway could run it twice; skipping it is the safe choice
		// for a job that a later run or an operator can catch up on.
		fmt.Printf("%s: Redis failure, job not run (fail closed): %v\n", name, err)
	}
}

// buildReport stands in for the real job. It stops as soon as its context
// is cancelled, which the lease does if the lock is lost.
func buildReport(ctx context.Context, name string) error {
	lk := locksmith.LockFromContext(ctx)
	timer := time.NewTimer(jobStep)
	defer timer.Stop()
	for step := 1; step <= jobSteps; step++ {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-timer.C:
		}
		ttl, err := lk.TTL(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("%s:   %3d%% done, lock TTL %v\n", name, step*100/jobSteps, ttl)
		timer.Reset(jobStep)
	}
	return nil
}
