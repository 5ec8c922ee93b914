package locksmith_test

import (
	"context"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith"
)

// A status page shows, for one day's report, whether a server is building
// it right now, the last fencing token and whether the job has completed.
func ExampleLocker_Inspect() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithPrefix("jobs:"), locksmith.WithFencing())
	defer locker.Close()
	key := "report:2026-11-30"

	show := func(when string) {
		st, err := locker.Inspect(ctx, key)
		if err != nil {
			fmt.Println("inspect:", err)
			return
		}
		fmt.Printf("%s: held %v, fenced %v, completed %v\n", when, st.Held, st.Fence > 0, st.Done != nil)
	}

	show("before")
	_, err := locker.Once(ctx, key, func(ctx context.Context) error {
		show("while it runs")
		return nil
	}, locksmith.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println("once:", err)
		return
	}
	show("after")
	// Output:
	// before: held false, fenced false, completed false
	// while it runs: held true, fenced true, completed false
	// after: held false, fenced true, completed true
}

// A status page tells which accounts a transfer holds: each key of a set
// says that it is held as part of a set, and of how many keys, and holds
// the set's one token.
func ExampleLocker_Inspect_set() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	lk, err := locker.ObtainAll(ctx, []string{"{bank}:account:alice", "{bank}:account:bob"})
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	for _, key := range []string{"{bank}:account:alice", "{bank}:account:bob", "{bank}:account:carol"} {
		st, err := locker.Inspect(ctx, key)
		switch {
		case err != nil:
			fmt.Println("inspect:", err)
		case st.SetSize > 0:
			fmt.Printf("%s: held as part of a set of %d keys, by the transfer %v\n", key, st.SetSize, st.Token == lk.Token())
		case st.Held:
			fmt.Printf("%s: held alone\n", key)
		default:
			fmt.Printf("%s: free\n", key)
		}
	}
	if err := lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output:
	// {bank}:account:alice: held as part of a set of 2 keys, by the transfer true
	// {bank}:account:bob: held as part of a set of 2 keys, by the transfer true
	// {bank}:account:carol: free
}
