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
