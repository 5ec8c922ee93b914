package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSetLockers runs the set rows that this benchmark writes itself (the
// one-script set, and a set taken one lock after another) against a
// private redis-server: a set is taken whole or not at all, waits as its
// row says, and releases only what it holds.
func TestSetLockers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d := privateDeployment(t)
	admin := d.admins[0]
	open := func(t *testing.T, l lib) setLocker {
		t.Helper()
		lk, err := l.newLocker(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lk.close)
		return lk.(setLocker)
	}
	exists := func(t *testing.T, keys ...string) int64 {
		t.Helper()
		n, err := admin.Exists(ctx, keys...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ab := []string{"{t}:a", "{t}:b"}
	bc := []string{"{t}:b", "{t}:c"}

	t.Run("one-script set", func(t *testing.T) {
		check(t, admin.FlushAll(ctx).Err())
		once := open(t, setScriptLib{})
		var hs heldSet
		check(t, once.obtainSet(ctx, ab, &hs))
		if n := exists(t, ab...); n != 2 {
			t.Fatalf("%d keys of the set exist, want 2", n)
		}
		ttl, err := admin.PTTL(ctx, ab[1]).Result()
		check(t, err)
		if ttl <= 0 || ttl > lockTTL {
			t.Errorf("PTTL = %v, want in (0, %v]", ttl, lockTTL)
		}

		// An overlapping set is refused and writes nothing.
		var other heldSet
		if err := once.obtainSet(ctx, bc, &other); !errors.Is(err, errNotObtained) {
			t.Fatalf("overlapping set: %v, want not obtained", err)
		}
		if n := exists(t, "{t}:c"); n != 0 {
			t.Errorf("the refused set wrote its free key")
		}

		// Waiting with a limit gives up after its retries.
		limited := open(t, setScriptLib{wait: true, interval: 10 * time.Millisecond, retries: 2})
		start := time.Now()
		if err := limited.obtainSet(ctx, bc, &other); !errors.Is(err, errNotObtained) {
			t.Fatalf("limited wait: %v, want not obtained", err)
		}
		if took := time.Since(start); took < 20*time.Millisecond {
			t.Errorf("limited wait gave up after %v, want 2 retries 10ms apart", took)
		}

		// Waiting without a limit takes the set once it is released.
		polling := open(t, setScriptLib{wait: true, interval: time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- polling.obtainSet(ctx, bc, &other) }()
		time.Sleep(20 * time.Millisecond)
		check(t, hs.release(ctx))
		check(t, <-done)
		if n := exists(t, ab[0]); n != 0 {
			t.Errorf("the released set's other key is still held")
		}

		// A release deletes nothing unless every key holds its token.
		check(t, admin.Set(ctx, "{t}:c", "someone else", 0).Err())
		if err := other.release(ctx); err == nil {
			t.Errorf("release of a set whose key was taken over succeeded")
		}
		if n := exists(t, bc...); n != 2 {
			t.Errorf("%d keys left after a refused release, want 2", n)
		}
	})

	t.Run("one lock after another", func(t *testing.T) {
		check(t, admin.FlushAll(ctx).Err())
		// A short deadline: the second key is held by someone else.
		check(t, admin.Set(ctx, "{t}:b", "someone else", 0).Err())
		for _, l := range []lib{redislockPairLib{}, redislockPairLib{wait: true}, smithPairLib{}, smithPairLib{wait: true}} {
			lk := open(t, l)
			c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			var hs heldSet
			err := lk.obtainSet(c, ab, &hs)
			cancel()
			if !errors.Is(err, errNotObtained) {
				t.Fatalf("%s (wait %v): %v, want not obtained", l.name(), l, err)
			}
			if len(hs.parts) != 0 {
				t.Errorf("%s: holds %d parts after failing", l.name(), len(hs.parts))
			}
			if n := exists(t, ab[0]); n != 0 {
				t.Errorf("%s: kept the first key after failing on the second", l.name())
			}
		}
		check(t, admin.Del(ctx, "{t}:b").Err())
		lk := open(t, redislockPairLib{})
		var hs heldSet
		check(t, lk.obtainSet(ctx, ab, &hs))
		if n := exists(t, ab...); n != 2 || len(hs.parts) != 2 {
			t.Fatalf("%d keys held in %d parts, want 2 and 2", n, len(hs.parts))
		}
		check(t, hs.release(ctx))
		if n := exists(t, ab...); n != 0 {
			t.Errorf("%d keys left after release, want 0", n)
		}
	})
}

// TestSetScriptsCopiedInTheLibrary: the library's BenchmarkClientCost and
// BenchmarkScriptCost measure copies of the one-script set's scripts (the
// library's module cannot import this one): they must be these scripts.
func TestSetScriptsCopiedInTheLibrary(t *testing.T) {
	src, err := os.ReadFile("../client_cost_bench_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, script := range map[string]string{"rawSetObtainSrc": setScriptObtainSrc, "rawSetReleaseSrc": setScriptReleaseSrc} {
		if !strings.Contains(string(src), name+" = `"+script+"`") {
			t.Errorf("../client_cost_bench_test.go: %s is not bench/sets.go's script", name)
		}
	}
}
