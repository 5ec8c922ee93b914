//go:build unix

package main_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	library "github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// scriptCalls is a hook that counts the scripts a client runs.
type scriptCalls struct{ n atomic.Int64 }

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// release --force announces the release: a library waiter whose retry
// delay (5s) and holder's TTL (a minute) cannot explain it gets the lock
// at once. Without the announcement it would wait for its queue entry's
// renewal, 2s after its last attempt.
func TestReleaseForceWakesWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	url, client := redisURL(srv, 0), srv.Client(t)
	ctx := t.Context()

	for _, tc := range []struct {
		name string
		// user and password to run release --force as; empty for the
		// default user
		user, password string
		// announced is whether the waiter hears the release
		announced bool
	}{
		{name: "default user", announced: true},
		// The publish is refused (NOPERM): the lock is deleted all the
		// same, and the waiter finds out by itself.
		{name: "no channel rights", user: fmt.Sprintf("nochannels%d", time.Now().UnixNano()), password: "pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			keys, err := library.New(client, library.WithPrefix("locksmith:")).Keys(key)
			if err != nil {
				t.Fatal(err)
			}
			if err := client.Set(ctx, keys.Lock, "stuck-holder", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			releaseURL := url
			if tc.user != "" {
				if err := client.Do(ctx, "ACL", "SETUSER", tc.user, "on", ">"+tc.password, "~*", "resetchannels", "+@all").Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = client.Do(context.Background(), "ACL", "DELUSER", tc.user).Err() })
				releaseURL = "redis://" + tc.user + ":" + tc.password + "@" + srv.Addr + "/0"
				opt := srv.Options()
				opt.Username, opt.Password = tc.user, tc.password
				uc := redis.NewClient(opt)
				err := uc.Publish(ctx, keys.Channel, "").Err()
				_ = uc.Close()
				if err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Fatalf("PUBLISH as %s: %v, want NOPERM", tc.user, err)
				}
			}

			calls := &scriptCalls{}
			wc := redis.NewClient(srv.Options())
			wc.AddHook(calls)
			t.Cleanup(func() { _ = wc.Close() })
			waiter := library.New(wc, library.WithPrefix("locksmith:"))
			t.Cleanup(func() { _ = waiter.Close() })
			type result struct {
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk, err := waiter.Obtain(wctx, key, library.WithRetry(library.LinearBackoff(5*time.Second)))
				at := time.Now()
				if err == nil {
					err = lk.Release(ctx)
				}
				got <- result{err, at}
			}()
			// Two attempts: the first and the one that follows the
			// subscription's confirmation. The waiter then sleeps.
			eventually(t, 10*time.Second, func() bool { return calls.n.Load() >= 2 }, "the waiter did not try twice")

			code, stdout, stderr := locksmith(t, nil, "release", "--redis", releaseURL, "--key", key, "--force")
			released := time.Now()
			if code != 0 || !strings.Contains(stdout, "deleted") {
				t.Fatalf("release --force: exit %d, stdout %q, stderr %q; want 0 and the lock deleted", code, stdout, stderr)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			took := r.at.Sub(released)
			t.Logf("the waiter obtained the lock %v after release --force returned", took)
			if tc.announced && took > time.Second {
				t.Errorf("the waiter obtained the lock %v after release --force; want it woken at once", took)
			}
		})
	}
}

// TestReleaseForceOneKeyOfASet: release --force of a key held as part of
// a set deletes that key alone and says so; the holder's lease ends with
// ErrLockLost at its next renewal, and its release then frees the set's
// other keys.
func TestReleaseForceOneKeyOfASet(t *testing.T) {
	t.Parallel()
	url, client := shared(t)
	ctx := t.Context()
	locker := library.New(client, library.WithPrefix("locksmith:"), library.WithTTL(900*time.Millisecond))
	t.Cleanup(func() { _ = locker.Close() })
	tag := uniqueKey(t)
	keys := []string{"{" + tag + "}:a", "{" + tag + "}:b", "{" + tag + "}:c"}
	lk, err := locker.ObtainAll(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	lease := lk.Lease(ctx)

	code, stdout, stderr := locksmith(t, nil, "release", "--redis", url, "--key", keys[1], "--force")
	if code != 0 || !strings.Contains(stdout, "as part of a set of 3 keys") ||
		!strings.Contains(stdout, "the set's other 2 keys stay held by token #"+mark(lk.Token())) || strings.Contains(stdout, lk.Token()) {
		t.Fatalf("release --force of one key of a set: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := client.Exists(ctx, "locksmith:"+keys[0], "locksmith:"+keys[2]).Val(); n != 2 {
		t.Fatalf("%d of the set's other keys held, want 2", n)
	}
	select {
	case <-lease.Done():
		if cause := context.Cause(lease); !errors.Is(cause, library.ErrLockLost) {
			t.Fatalf("the lease ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the set's lease did not end after one of its keys was deleted")
	}
	_ = lk.Release(ctx) // reports the key it no longer held
	if n := client.Exists(ctx, "locksmith:"+keys[0], "locksmith:"+keys[2]).Val(); n != 0 {
		t.Fatalf("%d of the set's keys still held after its release", n)
	}
}
