package locksmith_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// BenchmarkWaitersAtScale has 1,000 and 10,000 goroutines of one Locker
// wait, on one key and spread over 1,000 keys, while another Locker holds
// the keys; it measures what a waiter costs (goroutines, heap and stack
// per waiter, the subscriptions and pub/sub connections held), then
// releases the keys and lets every waiter take its key and release it at
// once, each release handing the key to the next: the handoffs per
// second, the requests per acquisition, and the waiters of a key served
// out of the order in which they started waiting. Run it with
//
//	go test -run '^$' -bench WaitersAtScale -benchtime 1x
func BenchmarkWaitersAtScale(b *testing.B) {
	srv := redistest.New(b)
	for _, waiters := range []int{1000, 10000} {
		for _, keys := range []int{1, 1000} {
			b.Run(fmt.Sprintf("waiters=%d/keys=%d", waiters, keys), func(b *testing.B) {
				for b.Loop() {
					waitersScale(b, srv, waiters, keys)
				}
			})
		}
	}
}

func waitersScale(b *testing.B, srv *redistest.Server, waiters, nkeys int) {
	ctx := context.Background()
	raw := srv.Client(b)
	holders := locksmith.New(srv.Client(b), locksmith.WithTTL(time.Minute))
	defer holders.Close()
	var rt roundTrips
	c := redis.NewClient(srv.Options())
	c.AddHook(&rt)
	defer c.Close()
	l := locksmith.New(c, locksmith.WithTTL(time.Minute), locksmith.WithRetry(locksmith.LinearBackoff(time.Minute)))
	defer l.Close()
	if err := l.Check(ctx); err != nil {
		b.Fatal(err)
	}

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	keys := make([]string, nkeys)
	held := make([]*locksmith.Lock, nkeys)
	channels := make([]string, nkeys)
	for i := range keys {
		keys[i] = "waiters:" + run + ":" + strconv.Itoa(i)
		lk, err := holders.Obtain(ctx, keys[i])
		if err != nil {
			b.Fatal(err)
		}
		held[i] = lk
		names, err := l.Keys(keys[i])
		if err != nil {
			b.Fatal(err)
		}
		channels[i] = names.Channel
	}
	goroutines, heap, stack := memNow()

	// Start the waiters one at a time, each once the one before waits, so
	// that the order in which the waiters of a key started is their
	// arrival order.
	var served atomic.Int64
	arrived := make([][]int, nkeys) // per key, the waiters in arrival order
	order := make([]int64, waiters) // when each waiter was served
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for w := range waiters {
		k := w % nkeys
		before := locksmith.QueuedWaiters(l, channels[k])
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := l.Obtain(ctx, keys[k])
			if err != nil {
				errs <- err
				return
			}
			order[w] = served.Add(1)
			if err := lk.Release(ctx); err != nil {
				errs <- err
			}
		}()
		for locksmith.QueuedWaiters(l, channels[k]) == before {
			time.Sleep(10 * time.Microsecond)
		}
		arrived[k] = append(arrived[k], w)
	}
	g, h, s := memNow()
	subs, pubsubConns := subscriptions(b, raw, channels)

	rt.reset()
	start := time.Now()
	for _, lk := range held {
		if err := lk.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	singles, _, piped := rt.counts()
	outOfOrder := 0
	for _, ws := range arrived {
		for i := 1; i < len(ws); i++ {
			if order[ws[i]] < order[ws[i-1]] {
				outOfOrder++
			}
		}
	}

	b.ReportMetric(float64(g-goroutines)/float64(waiters), "goroutines/waiter")
	b.ReportMetric(float64(int64(h)-int64(heap))/float64(waiters), "heap-B/waiter")
	b.ReportMetric(float64(int64(s)-int64(stack))/float64(waiters), "stack-B/waiter")
	b.ReportMetric(float64(subs), "subscriptions")
	b.ReportMetric(float64(waiters)/elapsed.Seconds(), "handoffs/s")
	b.ReportMetric(float64(singles+piped)/float64(waiters), "requests/acquisition")
	b.ReportMetric(float64(outOfOrder), "out-of-order")
	b.Logf("%d waiters on %d keys: %.2f goroutines, %.0f B heap and %.0f B stack a waiter; %d subscriptions on %d pub/sub connections; served in %v: %.0f handoffs/s, %.2f requests an acquisition, %d served before a waiter of their key that arrived earlier",
		waiters, nkeys, float64(g-goroutines)/float64(waiters), float64(int64(h)-int64(heap))/float64(waiters),
		float64(int64(s)-int64(stack))/float64(waiters), subs, pubsubConns, elapsed.Round(time.Millisecond),
		float64(waiters)/elapsed.Seconds(), float64(singles+piped)/float64(waiters), outOfOrder)
}

// subscriptions returns how many subscribers the server counts on
// channels, and how many pub/sub connections it has.
func subscriptions(b *testing.B, c *redis.Client, channels []string) (subs, conns int) {
	ctx := context.Background()
	for i := 0; i < len(channels); i += 500 {
		counts, err := c.PubSubNumSub(ctx, channels[i:min(i+500, len(channels))]...).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range counts {
			subs += int(n)
		}
	}
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(list, "\n") {
		if strings.Contains(line, " flags=P ") {
			conns++
		}
	}
	return subs, conns
}
