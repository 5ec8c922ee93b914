package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksmith-go/locksmith"
)

// Readers keep reading the cache while nobody rebuilds it; the rebuild
// takes the write hold, and once it waits, new readers wait behind it,
// so a steady stream of readers cannot starve it.
func ExampleRWMutex() {
	client, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := locksmith.New(client, locksmith.WithPrefix("myapp:"))
	defer locker.Close()

	cache := locker.RWMutex("cache:products")
	r1, _ := cache.ObtainRead(ctx)
	r2, err := cache.ObtainRead(ctx)
	fmt.Println("two readers at once:", err == nil)

	// The rebuild tries once and finds readers.
	_, err = cache.ObtainWrite(ctx)
	fmt.Println("writer beside readers:", errors.Is(err, locksmith.ErrNotObtained))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	err = cache.WithWriteLock(ctx, func(ctx context.Context) error {
		// Rebuild the cache: no reader holds meanwhile.
		return nil
	}, locksmith.WithTTL(time.Minute), locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
	fmt.Println("rebuilt:", err == nil)
	// Output:
	// two readers at once: true
	// writer beside readers: true
	// rebuilt: true
}
