package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith"
)

// One server of a fleet runs the scheduler; the others wait to take over.
// Run campaigns, runs the function while this process leads, and
// campaigns again after a lost term; the function's context is cancelled
// as soon as leadership is lost.
func ExampleElection_Run() {
	client, stop := exampleRedis()
	defer stop()
	locker := locksmith.New(client, locksmith.WithPrefix("myapp:"))
	defer locker.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	election := locker.Election("scheduler", locksmith.WithTTL(10*time.Second))
	err := election.Run(ctx, "host-a:8080", func(ctx context.Context, term *locksmith.Term) error {
		fmt.Println("leading, term fence > 0:", term.Fence() > 0)
		// Run the scheduler until ctx is done; here, one round and
		// shut down.
		cancel()
		<-ctx.Done()
		return nil
	})
	fmt.Println("stopped:", errors.Is(err, context.Canceled))
	// Output:
	// leading, term fence > 0: true
	// stopped: true
}

// Campaign blocks until the caller leads; Resign hands leadership to the
// candidate that has waited longest. Leader tells anyone who leads.
func ExampleElection_Campaign() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client)
	defer locker.Close()

	election := locker.Election("outbox-relay")
	term, err := election.Campaign(ctx, "host-a")
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	leader, err := election.Leader(ctx)
	if err != nil {
		fmt.Println("leader:", err)
		return
	}
	fmt.Println("leader:", leader.Value)

	if err := term.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	fmt.Println("term over:", errors.Is(context.Cause(term.Context()), locksmith.ErrResigned))
	_, err = election.Leader(ctx)
	fmt.Println("no leader:", errors.Is(err, locksmith.ErrNoLeader))
	// Output:
	// leader: host-a
	// term over: true
	// no leader: true
}

// Observe follows the leader as it changes: the current one first, then
// each new leader or proclaimed value, and the zero Leader while nobody
// leads.
func ExampleElection_Observe() {
	client, stop := exampleRedis()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locker := locksmith.New(client)
	defer locker.Close()

	election := locker.Election("cache-warmer")
	changes, err := election.Observe(ctx)
	if err != nil {
		fmt.Println("observe:", err)
		return
	}
	fmt.Printf("leader: %q\n", (<-changes).Value)

	term, err := election.Campaign(ctx, "host-b")
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	defer term.Resign(ctx)
	for l := range changes {
		if l.Value == "host-b" {
			fmt.Printf("leader: %q\n", l.Value)
			break
		}
	}
	// Output:
	// leader: ""
	// leader: "host-b"
}
