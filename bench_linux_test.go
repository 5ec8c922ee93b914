package locksmith_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// BenchmarkDistinctKeysCPU runs 64 goroutines on distinct keys, as the
// bench module's 64-key scenario does, through the raw recipe (SET NX PX
// and a compare-and-delete script) and the README's calls, and reports
// the process's CPU time a cycle (cpu-µs/op, from getrusage: the client's
// work, including go-redis and the runtime) and how often a command
// waited for one of go-redis's pooled connections (pool-waits/op).
// docs/performance.md uses it to compare the client's cost of WithLock
// with that of Obtain and Release:
//
//	go test -run '^$' -bench DistinctKeysCPU -benchtime 100000x -count 4
func BenchmarkDistinctKeysCPU(b *testing.B) {
	srv := redistest.New(b)
	client := srv.Client(b)
	l := newLocker(b, client)
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	var seq atomic.Int64
	for _, v := range []struct {
		name  string
		cycle func(key string) error
	}{
		{"raw", func(key string) error { return rawCycle(ctx, client, key) }},
		{"try-once", func(key string) error { return obtainRelease(ctx, l, key) }},
		{"lease", func(key string) error {
			lk, err := l.Obtain(ctx, key)
			if err != nil {
				return err
			}
			_ = lk.Lease(ctx)
			return lk.Release(ctx)
		}},
		{"WithLock", func(key string) error { return l.WithLock(ctx, key, noop) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			cpu0, waits0 := processCPU(b), client.PoolStats().WaitCount
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:cpu:%d", seq.Add(1))
				for pb.Next() {
					if err := v.cycle(key); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/float64(time.Microsecond), "cpu-µs/op")
			b.ReportMetric(float64(client.PoolStats().WaitCount-waits0)/float64(b.N), "pool-waits/op")
		})
	}
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
