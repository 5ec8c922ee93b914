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
// one renewal interval, so their renewals fall due spread over it. The
// cluster runs hold 1,000 and 10,000 on a Redis Cluster of 3 masters
// (with a replica each), the keys spread over its slots: renewed together,
// a pipeline goes to each master (round trips are counted on the masters'
// own clients). Run it with
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
					leaseScale(b, serverDeployment(b, srv), n, alone, ttl, interval, measured)
				}
			})
		}
	}
	cl := redistest.SharedCluster(b)
	for _, n := range []int{1000, 10000} {
		for _, alone := range []bool{true, false} {
			name := map[bool]string{true: "alone", false: "together"}[alone]
			b.Run(fmt.Sprintf("cluster/leases=%d/%s", n, name), func(b *testing.B) {
				for b.Loop() {
					leaseScale(b, clusterDeployment(b, cl), n, alone, ttl, interval, measured)
				}
			})
		}
	}
}

// A scaleDeployment is where leaseScale holds its leases: the client the
// Locker uses, with rt counting its round trips, and a client on each
// server, to read what the servers ran.
type scaleDeployment struct {
	client  redis.UniversalClient
	rt      *roundTrips
	servers []*redis.Client
}

// serverDeployment is srv, one server.
func serverDeployment(b *testing.B, srv *redistest.Server) scaleDeployment {
	rt := &roundTrips{}
	c := redis.NewClient(srv.Options())
	c.AddHook(rt)
	b.Cleanup(func() { _ = c.Close() })
	return scaleDeployment{client: c, rt: rt, servers: []*redis.Client{srv.Client(b)}}
}

// clusterDeployment is cl, whose nodes' clients count the round trips
// (the renewer pipelines through each master's own client).
func clusterDeployment(b *testing.B, cl *redistest.Cluster) scaleDeployment {
	rt := &roundTrips{}
	cc := cl.Client(b)
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(rt) })
	d := scaleDeployment{client: cc, rt: rt}
	for _, s := range cl.Nodes {
		d.servers = append(d.servers, s.Client(b))
	}
	return d
}

func leaseScale(b *testing.B, d scaleDeployment, n int, alone bool, ttl, interval, measured time.Duration) {
	ctx := context.Background()
	rt := d.rt
	l := locksmith.New(d.client, locksmith.WithTTL(ttl), locksmith.WithRenewInterval(interval))
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
	before := evalshaCalls(b, d.servers)
	from := time.Now()
	time.Sleep(measured)
	elapsed := time.Since(from)
	calls := evalshaCalls(b, d.servers) - before
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

// evalshaCalls returns how many EVALSHA the servers have run.
func evalshaCalls(b *testing.B, servers []*redis.Client) int64 {
	var total int64
	for _, c := range servers {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				total += n
			}
		}
	}
	return total
}
