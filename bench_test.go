package locksmith_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The benchmarks run against a real redis-server started for them. The
// raw baseline is the recipe with nothing around it: SET NX PX, then a
// compare-and-delete script, which is what an uncontended Obtain plus
// Release must not be slower than. Compare them side by side:
//
//	go test -run '^$' -bench . -benchmem

var rawRelease = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// rawCycle takes key with the recipe, SET NX PX of a new token, and
// releases it with the compare-and-delete script.
func rawCycle(ctx context.Context, c *redis.Client, key string) error {
	token := uuid.NewString()
	switch ok, err := c.SetNX(ctx, key, token, 10*time.Second).Result(); {
	case err != nil:
		return fmt.Errorf("SET NX %s: %w", key, err)
	case !ok:
		return fmt.Errorf("SET NX %s: the key is taken", key)
	}
	return rawRelease.Run(ctx, c, []string{key}, token).Err()
}

func BenchmarkUncontended(b *testing.B) {
	srv := redistest.New(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		c := srv.Client(b)
		key := "bench:raw"
		b.ReportAllocs()
		for b.Loop() {
			if err := rawCycle(ctx, c, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("locksmith", func(b *testing.B) {
		l := newLocker(b, srv.Client(b))
		b.ReportAllocs()
		for b.Loop() {
			if err := obtainRelease(ctx, l, "bench:locksmith"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As the README's examples call it: options per call.
	b.Run("locksmith-per-call-ttl", func(b *testing.B) {
		l := newLocker(b, srv.Client(b))
		b.ReportAllocs()
		for b.Loop() {
			lk, err := l.Obtain(ctx, "bench:per-call", locksmith.WithTTL(30*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("withlock", func(b *testing.B) {
		l := newLocker(b, srv.Client(b))
		noop := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := l.WithLock(ctx, "bench:withlock", noop, locksmith.WithTTL(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// With an observer that does nothing: the cost of emitting two
	// events (obtain, release) per cycle and delivering them.
	discard := locksmith.WithObserver(locksmith.ObserverFunc(func(locksmith.Event) {}))
	b.Run("locksmith-observed", func(b *testing.B) {
		l := newLocker(b, srv.Client(b), discard)
		b.ReportAllocs()
		for b.Loop() {
			if err := obtainRelease(ctx, l, "bench:observed"); err != nil {
				b.Fatal(err)
			}
		}
		if s := l.ObserverStats(); s.Dropped > 0 {
			b.Logf("%d of %d events dropped", s.Dropped, s.Dropped+s.Delivered)
		}
	})
	b.Run("withlock-observed", func(b *testing.B) {
		l := newLocker(b, srv.Client(b), discard)
		noop := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := l.WithLock(ctx, "bench:withlock-observed", noop, locksmith.WithTTL(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// With a tracer that does nothing: the cost of the hook itself (the
	// otel module's benchmark measures OpenTelemetry's).
	nop := locksmith.WithTracer(nopTracer{})
	b.Run("locksmith-traced", func(b *testing.B) {
		l := newLocker(b, srv.Client(b), nop)
		b.ReportAllocs()
		for b.Loop() {
			if err := obtainRelease(ctx, l, "bench:traced"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("withlock-traced", func(b *testing.B) {
		l := newLocker(b, srv.Client(b), nop)
		noop := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := l.WithLock(ctx, "bench:withlock-traced", noop, locksmith.WithTTL(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nopTracer is a Tracer that does nothing.
type nopTracer struct{}

func (nopTracer) Start(ctx context.Context, _ locksmith.Call) context.Context { return ctx }
func (nopTracer) End(context.Context, locksmith.Call, locksmith.Outcome)      {}

func BenchmarkDistinctKeysParallel(b *testing.B) {
	srv := redistest.New(b)
	l := newLocker(b, srv.Client(b))
	ctx := context.Background()
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench:distinct:%d", seq.Add(1))
		for pb.Next() {
			if err := obtainRelease(ctx, l, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkContended hands one key from goroutine to goroutine; ns/op is
// the time per handoff.
func BenchmarkContended(b *testing.B) {
	srv := redistest.New(b)
	ctx := context.Background()
	for _, waiters := range []int{2, 16} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			l := newLocker(b, srv.Client(b), locksmith.WithRetry(locksmith.LinearBackoff(100*time.Millisecond)))
			b.SetParallelism(waiters)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := obtainRelease(ctx, l, "bench:contended"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// obtainRelease takes the lock on key and gives it back.
func obtainRelease(ctx context.Context, l *locksmith.Locker, key string) error {
	lk, err := l.Obtain(ctx, key)
	if err != nil {
		return err
	}
	return lk.Release(ctx)
}

// BenchmarkQuorumUncontended is Obtain + Release on a quorum of three.
func BenchmarkQuorumUncontended(b *testing.B) {
	l := newQuorumLocker(b, quorumClients(b))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := obtainRelease(ctx, l, "bench:quorum"); err != nil {
			b.Fatal(err)
		}
	}
}

// quorumClients starts three servers and returns a client of each, with
// the timeouts that NewQuorum asks for, closed when b ends.
func quorumClients(b *testing.B) []redis.UniversalClient {
	var clients []redis.UniversalClient
	for range 3 {
		opt := redistest.New(b).Options()
		opt.ContextTimeoutEnabled = true
		c := redis.NewClient(opt)
		b.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	return clients
}

// BenchmarkQuorumUncontendedGuarded is BenchmarkQuorumUncontended with
// the restart guard watching every master (the default of NewQuorum),
// once the masters have been up for the maximum TTL: the steady state,
// whose acquires send nothing more.
func BenchmarkQuorumUncontendedGuarded(b *testing.B) {
	l := newGuardedQuorum(b, quorumClients(b), locksmith.WithTTL(2*time.Second))
	benchGuarded(b, l, "bench:quorum-guarded")
}

// BenchmarkQuorumUncontendedWaiting is BenchmarkQuorumUncontendedGuarded
// by a caller that would wait (a retry strategy on NewQuorum, as the bench
// module's quorum row makes it): the waiting path's first attempt on each
// master.
func BenchmarkQuorumUncontendedWaiting(b *testing.B) {
	l := newGuardedQuorum(b, quorumClients(b), locksmith.WithTTL(2*time.Second), locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	benchGuarded(b, l, "bench:quorum-waiting")
}

// BenchmarkUncontendedGuarded is Obtain + Release on one server with
// WithRestartGuard, in the steady state.
func BenchmarkUncontendedGuarded(b *testing.B) {
	srv := redistest.New(b)
	l := newLocker(b, srv.Client(b), locksmith.WithRestartGuard(), locksmith.WithTTL(2*time.Second))
	benchGuarded(b, l, "bench:guarded")
}

// benchGuarded waits until l's masters count, then measures Obtain and
// Release of key.
func benchGuarded(b *testing.B, l *locksmith.Locker, key string) {
	// Waited out on another key, so that the measured key is one this
	// Locker has not waited for (a waiting call's first attempt on a key
	// its Locker waited for recently goes straight to the script).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	lk, err := l.Obtain(ctx, key+":guard", locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	if err := lk.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
	ctx = context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := obtainRelease(ctx, l, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUncontendedWaiting is Obtain + Release on a free key by a
// caller that would wait: the waiting path's first attempt.
func BenchmarkUncontendedWaiting(b *testing.B) {
	srv := redistest.New(b)
	l := newLocker(b, srv.Client(b), locksmith.WithRetry(locksmith.LinearBackoff(50*time.Millisecond)))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := obtainRelease(ctx, l, "bench:waiting"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryOnceTaken is a try-once Obtain of a lock someone else holds:
// the cost of being refused.
func BenchmarkTryOnceTaken(b *testing.B) {
	srv := redistest.New(b)
	ctx := context.Background()
	holder := newLocker(b, srv.Client(b))
	lk, err := holder.Obtain(ctx, "bench:taken", locksmith.WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lk.Release(context.Background()) })
	l := newLocker(b, srv.Client(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Obtain(ctx, "bench:taken"); !errors.Is(err, locksmith.ErrNotObtained) {
			b.Fatalf("Obtain = %v, want ErrNotObtained", err)
		}
	}
}

// BenchmarkFanOut is the floor under a quorum's round trip on this
// machine: one GET to one server, one GET to each of three servers at
// once (from three goroutines, as a quorum asks its masters), and three
// GETs in turn. Where the second is close to the third (two vCPUs, the
// servers and the client waking one another), no quorum of three can
// come near one server's rate.
func BenchmarkFanOut(b *testing.B) {
	ctx := context.Background()
	var clients []*redis.Client
	for range 3 {
		clients = append(clients, redistest.New(b).Client(b))
	}
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			if err := clients[0].Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
				b.Fatal(err)
			}
		}
	})
	b.Run("three-at-once", func(b *testing.B) {
		errs := make(chan error, len(clients))
		for b.Loop() {
			for _, c := range clients {
				go func() { errs <- c.Get(ctx, "k").Err() }()
			}
			for range clients {
				if err := <-errs; !errors.Is(err, redis.Nil) {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("three-in-turn", func(b *testing.B) {
		for b.Loop() {
			for _, c := range clients {
				if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkObtainAllUncontended is ObtainAll + Release of a free set of
// two keys in one slot: trying once, and as a caller that would wait.
func BenchmarkObtainAllUncontended(b *testing.B) {
	srv := redistest.New(b)
	ctx := context.Background()
	keys := []string{"{bench:set}:a", "{bench:set}:b"}
	for _, tc := range []struct {
		name string
		opts []locksmith.Option
	}{
		{"try-once", nil},
		{"waiting", []locksmith.Option{locksmith.WithRetry(locksmith.LinearBackoff(50 * time.Millisecond))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newLocker(b, srv.Client(b))
			b.ReportAllocs()
			for b.Loop() {
				lk, err := l.ObtainAll(ctx, keys, tc.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
