package locksmith_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// BenchmarkLeasesAtScale holds 100, 1,000 and 10,000 leased locks on one
// Locker and measures what they cost while they are renewed: goroutines
// and heap per lease, Redis commands per second, and round trips per
// renewal interval; each with a goroutine per lease (alone, the design
// before renewers, which quorums and sets still use) and renewed together
// by the Locker's store (together). The locks are obtained evenly over
// one renewal interval, so their renewals fall due spread over it. Run it
// with
//
//	go test -run '^$' -bench LeasesAtScale -benchtime 1x
func BenchmarkLeasesAtScale(b *testing.B) {
	const (
		ttl      = 3 * time.Second
		interval = time.Second
		measured = 6 * interval
	)
	srv := redistest.New(b)
	for _, n := range []int{100, 1000, 10000} {
		for _, alone := range []bool{true, false} {
			name := map[bool]string{true: "alone", false: "together"}[alone]
			b.Run(fmt.Sprintf("leases=%d/%s", n, name), func(b *testing.B) {
				for b.Loop() {
					leaseScale(b, srv, n, alone, ttl, interval, measured)
				}
			})
		}
	}
}

func leaseScale(b *testing.B, srv *redistest.Server, n int, alone bool, ttl, interval, measured time.Duration) {
	ctx := context.Background()
	var rt roundTrips
	c := redis.NewClient(srv.Options())
	c.AddHook(&rt)
	defer c.Close()
	raw := srv.Client(b)
	l := locksmith.New(c, locksmith.WithTTL(ttl), locksmith.WithRenewInterval(interval))
	defer l.Close()
	locksmith.SetRenewAlone(alone)
	defer locksmith.SetRenewAlone(false)

	// Obtained evenly over one renewal interval, in 100 steps, as a
	// service takes its locks over time: their renewals fall due spread
	// over the interval.
	const steps = 100
	locks := make([]*locksmith.Lock, n)
	obtained := time.Now()
	tick := time.NewTicker(interval / steps)
	defer tick.Stop()
	for i := range locks {
		if i > 0 && i%(n/steps) == 0 {
			<-tick.C
		}
		lk, err := l.Obtain(ctx, "scale:"+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		locks[i] = lk
	}
	// The renewals fall due spread over the time the locks took to obtain.
	spread := time.Since(obtained)
	goroutines, heap, stack := memNow()
	deadlines := make([]time.Time, n)
	for i, lk := range locks {
		deadlines[i] = lk.Deadline()
		lk.Lease(ctx)
	}
	// Every lease renewed once at least (a lease's goroutine starts at
	// its first renewal), then measure.
	for i, lk := range locks {
		for !lk.Deadline().After(deadlines[i]) {
			time.Sleep(time.Millisecond)
		}
	}
	rt.reset()
	before := evalshaCalls(b, raw)
	from := time.Now()
	time.Sleep(measured)
	elapsed := time.Since(from)
	calls := evalshaCalls(b, raw) - before
	singles, pipes, _ := rt.counts()
	g, h, s := memNow()

	perInterval := float64(singles+pipes) / (float64(elapsed) / float64(interval))
	b.ReportMetric(float64(g-goroutines), "goroutines")
	b.ReportMetric(float64(int64(h)-int64(heap))/float64(n), "heap-B/lease")
	b.ReportMetric(float64(int64(s)-int64(stack))/float64(n), "stack-B/lease")
	b.ReportMetric(float64(calls)/elapsed.Seconds(), "commands/s")
	b.ReportMetric(perInterval, "round-trips/interval")
	b.Logf("%d leases (%s), obtained over %v: %d goroutines, %.0f B heap and %.0f B stack a lease, %.0f commands/s, %.1f round trips a renewal interval",
		n, map[bool]string{true: "a goroutine each", false: "renewed together"}[alone], spread.Round(time.Millisecond),
		g-goroutines, float64(int64(h)-int64(heap))/float64(n), float64(int64(s)-int64(stack))/float64(n), float64(calls)/elapsed.Seconds(), perInterval)

	for _, lk := range locks {
		if err := lk.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// memNow returns the number of goroutines and the heap and stack in use,
// after a collection.
func memNow() (goroutines int, heap, stack uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc, m.StackInuse
}

// evalshaCalls returns how many EVALSHA the server has run.
func evalshaCalls(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}
