package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksmith-go/locksmith"
)

// At most three workers, across every process that shares the Redis,
// call the payment API at once. Each permit is leased: WithPermit renews
// it while the call runs, and a worker that crashes gives its permit back
// when its TTL runs out.
func ExampleSemaphore() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithPrefix("myapp:"))
	defer locker.Close()

	payments := locker.Semaphore("payment-api", 3)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := payments.WithPermit(ctx, func(ctx context.Context) error {
				n := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond) // the call to the payment API
				return nil
			}, locksmith.WithTTL(30*time.Second), locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
			if err != nil {
				fmt.Println("payment:", err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("at most 3 at once:", most.Load() <= 3)
	// Output:
	// at most 3 at once: true
}

// Acquire without a retry strategy tries once: when every permit is
// held it fails at once with ErrNotObtained.
func ExampleSemaphore_Acquire() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	sem := locker.Semaphore("exports", 2)
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	_, err := sem.Acquire(ctx)
	fmt.Println("third:", errors.Is(err, locksmith.ErrNotObtained))

	_ = a.Release(ctx)
	c, err := sem.Acquire(ctx)
	fmt.Println("after a release:", err == nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third: true
	// after a release: true
}
