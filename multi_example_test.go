package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith"
)

// A transfer between two accounts holds both accounts' locks at once:
// every key or none, whatever order the callers name them in.
func ExampleLocker_ObtainAll() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithFencing())
	defer locker.Close()

	// The keys share a hash tag, so that the set also serves on Redis
	// Cluster, where a set must lie in one hash slot.
	lk, err := locker.ObtainAll(ctx, []string{"{bank}:account:bob", "{bank}:account:alice"})
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	fmt.Println("holding:", lk.Keys())
	fmt.Println("a fence for each:", lk.FenceOf("{bank}:account:alice") > 0, lk.FenceOf("{bank}:account:bob") > 0)

	// A set that overlaps a held one is not obtained, and holds none of
	// its keys.
	_, err = locker.ObtainAll(ctx, []string{"{bank}:account:carol", "{bank}:account:bob"})
	fmt.Println("overlapping set not obtained:", errors.Is(err, locksmith.ErrNotObtained))
	n, _ := client.Exists(ctx, "{bank}:account:carol").Result()
	fmt.Println("carol left free:", n == 0)

	if err := lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output:
	// holding: [{bank}:account:alice {bank}:account:bob]
	// a fence for each: true true
	// overlapping set not obtained: true
	// carol left free: true
}

// WithLocks runs a function holding every key of a set, renewing them all,
// and releases them when it returns.
func ExampleLocker_WithLocks() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	keys := []string{"{bank}:account:alice", "{bank}:account:bob"}
	err := locker.WithLocks(ctx, keys, func(ctx context.Context) error {
		// Stop when ctx is done: the set was lost.
		fmt.Println("moving money while holding", locksmith.LockFromContext(ctx).Keys())
		return nil
	}, locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	fmt.Println("err:", err)
	// Output:
	// moving money while holding [{bank}:account:alice {bank}:account:bob]
	// err: <nil>
}
