package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRawRWLock runs the raw read-write lock against a private
// redis-server: readers share, a waiting writer stops new readers and
// enters when they leave, writers exclude each other, a writer that gives
// up withdraws its intent, and expired holds stop nobody.
func TestRawRWLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := privateDeployment(t)
	lk, err := rawRWLib{retry: time.Millisecond}.newLocker(d)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.close()
	l := lk.(*rawRWLocker)
	const key = "test:rw"
	intents := func() int64 {
		n, err := d.admins[0].ZCard(ctx, rawRWKeys(key)[2]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// notObtained checks that a call with a short deadline fails.
	notObtained := func(what string, obtain func(context.Context, string) (held, error)) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		if h, err := obtain(c, key); !errors.Is(err, errNotObtained) {
			if h != nil {
				_ = h.release(ctx)
			}
			t.Fatalf("%s: got %v, want not obtained", what, err)
		}
	}
	must := func(h held, err error) held {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	r1 := must(l.obtainRead(ctx, key))
	r2 := must(l.obtainRead(ctx, key))
	notObtained("writer beside readers", l.obtain)
	if n := intents(); n != 0 {
		t.Fatalf("%d intents after a writer gave up, want 0", n)
	}

	type got struct {
		h   held
		err error
	}
	wch := make(chan got, 1)
	go func() {
		h, err := l.obtain(ctx, key)
		wch <- got{h, err}
	}()
	for intents() == 0 {
		time.Sleep(time.Millisecond)
	}
	notObtained("reader behind a waiting writer", l.obtainRead)
	check(r1.release(ctx))
	check(r2.release(ctx))
	w := <-wch
	if w.err != nil {
		t.Fatal(w.err)
	}
	if n := intents(); n != 0 {
		t.Fatalf("%d intents once the writer entered, want 0", n)
	}
	notObtained("second writer", l.obtain)
	notObtained("reader beside the writer", l.obtainRead)
	check(w.h.release(ctx))
	if err := w.h.release(ctx); err == nil {
		t.Error("a second release of the write hold succeeded")
	}

	// Expired holds stop nobody.
	short := &rawRWLocker{client: l.client, retry: time.Millisecond, ttl: 50 * time.Millisecond, intentLife: 50 * time.Millisecond}
	_ = must(short.obtainRead(ctx, key))
	time.Sleep(80 * time.Millisecond)
	w2 := must(l.obtain(ctx, key))
	check(w2.release(ctx))
	_ = must(short.obtain(ctx, key))
	time.Sleep(80 * time.Millisecond)
	check(must(l.obtainRead(ctx, key)).release(ctx))

	// An intent lapses unless renewed: that of a writer that died.
	now, err := d.admins[0].Time(ctx).Result()
	check(err)
	check(d.admins[0].ZAdd(ctx, rawRWKeys(key)[2], redis.Z{Score: float64(now.UnixMilli() + 50), Member: "dead"}).Err())
	notObtained("reader behind a dead writer's intent", l.obtainRead)
	time.Sleep(50 * time.Millisecond)
	check(must(l.obtainRead(ctx, key)).release(ctx))
}
