package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/locksmith-go/locksmith"
)

func ExampleWithObserver() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// The observer is called from one goroutine of the Locker, never from
	// the caller's: it may be slow without slowing down locking.
	observer := locksmith.ObserverFunc(func(e locksmith.Event) {
		switch e.Kind {
		case locksmith.EventObtain:
			fmt.Printf("obtain %s: attempts=%d class=%q\n", e.Key, e.Attempts, e.Class)
		case locksmith.EventRelease:
			fmt.Printf("release %s: err=%v\n", e.Key, e.Err)
		}
		// Kinds it does not know (added later) are ignored.
	})
	locker := locksmith.New(client, locksmith.WithObserver(observer))

	lk, err := locker.Obtain(ctx, "invoice:7")
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	_, second := locker.Obtain(ctx, "invoice:7") // held: not obtained
	if err := lk.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}

	// Close delivers the events still buffered, and waits for the
	// observer to return: only then is this goroutine's output in order
	// with the observer's.
	_ = locker.Close()
	fmt.Println("second obtain not obtained:", errors.Is(second, locksmith.ErrNotObtained))
	fmt.Printf("%+v\n", locker.ObserverStats())
	// Output:
	// obtain invoice:7: attempts=1 class=""
	// obtain invoice:7: attempts=1 class="not-obtained"
	// release invoice:7: err=<nil>
	// second obtain not obtained: true
	// {Delivered:3 Dropped:0 Panicked:0}
}

func ExampleSlogObserver() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// Records without their time, so that the output below is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	locker := locksmith.New(client, locksmith.WithObserver(locksmith.SlogObserver(logger)))

	job := func(context.Context) error { return nil }
	for range 2 {
		if _, err := locker.Once(ctx, "report:2024-06-01", job); err != nil {
			fmt.Println("once:", err)
		}
	}
	_ = locker.Close()
	// Output:
	// level=INFO msg="locksmith: once: ran and recorded" key=report:2024-06-01 once=recorded
	// level=INFO msg="locksmith: once: skipped, already done" key=report:2024-06-01 once=skipped
}
