package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksmith-go/locksmith"
)

// fencedStore stands for the resource a lock protects: a database row, a
// file, another service. It remembers the highest fencing token it has
// seen and rejects writes that carry a lower one.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

var errStaleFence = errors.New("stale fencing token")

func (s *fencedStore) Write(fence int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return fmt.Errorf("write %q with token %d: %w", value, fence, errStaleFence)
	}
	s.highest, s.value = fence, value
	return nil
}

// A holder that stalls past its TTL (a long GC pause, say) wakes up
// believing it still holds the lock. The fencing token lets the resource
// tell: the stalled holder's write is rejected once the next holder has
// written.
func Example_fencing() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithFencing())
	defer locker.Close()
	store := &fencedStore{}

	slow, err := locker.Obtain(ctx, "invoice:7", locksmith.WithTTL(100*time.Millisecond))
	if err != nil {
		fmt.Println("obtain:", err)
		return
	}
	time.Sleep(150 * time.Millisecond) // the slow holder stalls; its lock expires

	err = locker.WithLock(ctx, "invoice:7", func(ctx context.Context) error {
		lk := locksmith.LockFromContext(ctx)
		return store.Write(lk.Fence(), "paid")
	})
	fmt.Println("new holder writes:", err)

	// The slow holder wakes up and writes with its old token.
	err = store.Write(slow.Fence(), "unpaid")
	fmt.Println("stale write rejected:", errors.Is(err, errStaleFence))
	fmt.Println("value:", store.value)
	// Output:
	// new holder writes: <nil>
	// stale write rejected: true
	// value: paid
}
