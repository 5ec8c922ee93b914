package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith"
)

// A scheduler fires the daily report three times, as schedulers on several
// servers, or one that retries, do. The first run fails and records
// nothing, so the second runs the job again; it completes, so the third
// skips it.
func ExampleLocker_Once() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithPrefix("jobs:"))
	defer locker.Close()

	// The key names the period: tomorrow's report is another job.
	key := "report:2026-11-30"
	printerJammed := true
	buildReport := func(ctx context.Context) error {
		if printerJammed {
			printerJammed = false
			return errors.New("printer jammed")
		}
		fmt.Println("  report built")
		return nil
	}

	for fire := 1; fire <= 3; fire++ {
		ran, err := locker.Once(ctx, key, buildReport,
			locksmith.WithTTL(30*time.Second),   // the lock, renewed while the job runs
			locksmith.WithDoneTTL(48*time.Hour)) // the completion record
		switch {
		case errors.Is(err, locksmith.ErrNotObtained):
			fmt.Printf("fire %d: another server is running it\n", fire)
		case err != nil:
			fmt.Printf("fire %d: failed, may run again: %v\n", fire, err)
		case ran:
			fmt.Printf("fire %d: done\n", fire)
		default:
			fmt.Printf("fire %d: already done, skipped\n", fire)
		}
	}

	// For a status page.
	c, ok, err := locker.Completed(ctx, key)
	if err != nil {
		fmt.Println("done:", err)
		return
	}
	fmt.Println("completed:", ok, "recorded in the last minute:", time.Since(c.At) < time.Minute)
	keys, _ := locker.Keys(key)
	n, _ := client.Exists(ctx, keys.Done).Result()
	fmt.Println("record at", keys.Done+":", n == 1)
	// Output:
	// fire 1: failed, may run again: printer jammed
	//   report built
	// fire 2: done
	// fire 3: already done, skipped
	// completed: true recorded in the last minute: true
	// record at jobs:~done#{jobs:report:2026-11-30}: true
}
