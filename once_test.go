package locksmith_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// doneKey is where Once keeps the record of the lock on key, without a
// prefix.
func doneKey(key string) string { return plainNames(key).Done }

// requireNoRecord checks that key has no completion record, through Done
// and in Redis.
func requireNoRecord(t *testing.T, raw *redis.Client, l *locksmith.Locker, key string) {
	t.Helper()
	c, ok, err := l.Completed(t.Context(), key)
	require.NoError(t, err)
	require.False(t, ok, "a completion record was written: %+v", c)
	require.Zero(t, raw.Exists(t.Context(), doneKey(key)).Val())
}

func TestOnceRunsOnceAcrossWorkers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, wait := range []bool{true, false} {
			name := "try once"
			if wait {
				name = "wait"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				raw := b.client(t)
				key := uniqueKey(t)
				opts := []locksmith.Option{locksmith.WithTTL(300 * time.Millisecond)} // renewed while the job runs
				if wait {
					opts = append(opts, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
				}

				// Five servers, each with its own connection and Locker,
				// fire the same job half a second apart; it takes a second.
				const workers, stagger, job = 5, 500 * time.Millisecond, time.Second
				type result struct {
					ran bool
					err error
				}
				var (
					calls   atomic.Int64
					results [workers]result
					wg      sync.WaitGroup
				)
				lockers := make([]*locksmith.Locker, workers)
				for i := range lockers {
					c := b.client(t)
					require.NoError(t, c.Ping(ctx).Err())
					lockers[i] = newLocker(t, c)
				}
				start := time.Now()
				for i, l := range lockers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(time.Until(start.Add(time.Duration(i) * stagger)))
						ran, err := l.Once(ctx, key, func(ctx context.Context) error {
							calls.Add(1)
							select {
							case <-time.After(job):
								return nil
							case <-ctx.Done():
								return context.Cause(ctx)
							}
						}, opts...)
						results[i] = result{ran, err}
					}()
				}
				wg.Wait()

				require.Equal(t, int64(1), calls.Load(), "the job ran %d times", calls.Load())
				require.Equal(t, result{true, nil}, results[0], "the first server runs the job")
				for i, r := range results[1:] {
					require.False(t, r.ran, "server %d", i+2)
					switch {
					case wait, i+2 >= 4:
						// A waiter gets the lock once the job is done, finds
						// the record and runs nothing; a server that fires
						// after the job completed does not even take the lock.
						require.NoError(t, r.err, "server %d", i+2)
					case i+2 == 2:
						require.ErrorIs(t, r.err, locksmith.ErrNotObtained, "server 2 fired while the job ran")
					default:
						// Server 3 fired as the job ended: either is right.
						if r.err != nil {
							require.ErrorIs(t, r.err, locksmith.ErrNotObtained, "server 3")
						}
					}
				}

				c, ok, err := lockers[4].Completed(ctx, key)
				require.NoError(t, err)
				require.True(t, ok, "no completion record")
				host, _ := os.Hostname()
				require.Equal(t, fmt.Sprintf("%s:%d", host, os.Getpid()), c.By)
				require.Len(t, c.Token, 36)
				require.WithinRange(t, c.At, start.Add(job), time.Now())
				require.Zero(t, raw.Exists(ctx, key).Val(), "the lock is deleted with the record written")
				ttl := raw.PTTL(ctx, doneKey(key)).Val()
				require.Greater(t, ttl, locksmith.DefaultDoneTTL-time.Minute, "the record keeps for the default retention")
				require.LessOrEqual(t, ttl, locksmith.DefaultDoneTTL)
			})
		}
	})
}

// TestOnceCompletionWakesWaiters checks that completing a job announces
// the release as Release does: a waiter whose strategy would sleep for an
// hour, behind a holder whose TTL is a minute, wakes at once, finds the
// record and runs nothing.
func TestOnceCompletionWakesWaiters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		key := uniqueKey(t)
		holder := newLocker(t, b.client(t), locksmith.WithTTL(time.Minute))
		attempts := &scripts{}
		waiter := checked(t, newLocker(t, b.client(t, attempts)), &attempts.n)
		running, finish := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			_, err := holder.Once(ctx, key, func(context.Context) error {
				close(running)
				<-finish
				return nil
			})
			held <- err
		}()
		<-running

		type result struct {
			ran bool
			err error
			at  time.Time
		}
		waited := make(chan result, 1)
		go func() {
			ran, err := waiter.Once(ctx, key, func(context.Context) error {
				t.Error("the waiter ran the completed job")
				return nil
			}, locksmith.WithRetry(locksmith.LinearBackoff(time.Hour)))
			waited <- result{ran, err, time.Now()}
		}()
		// The waiter subscribes, makes the attempt that follows the
		// confirmation, and sleeps.
		waitSubscribed(t, b.client(t), plainNames(key).Channel, 1)
		attempts.wait(t, 2)
		completed := time.Now()
		close(finish)
		require.NoError(t, <-held)
		r := <-waited
		require.NoError(t, r.err)
		require.False(t, r.ran)
		require.Less(t, r.at.Sub(completed), wakeBound, "the waiter was not woken by the completion")
	})
}

func TestOnceFailedJobRunsAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t))
		key := uniqueKey(t)
		var calls int
		job := func(fail bool) func(context.Context) error {
			return func(ctx context.Context) error {
				calls++
				lk := locksmith.LockFromContext(ctx)
				require.NotNil(t, lk, "fn runs under a lease")
				require.Equal(t, lk.Token(), raw.Get(ctx, key).Val())
				if fail {
					return errJob
				}
				return nil
			}
		}

		ran, err := l.Once(ctx, key, job(true))
		require.True(t, ran)
		require.ErrorIs(t, err, errJob)
		require.NotErrorIs(t, err, locksmith.ErrLockLost)
		requireNoRecord(t, raw, l, key)
		require.Zero(t, raw.Exists(ctx, key).Val(), "released after the failure")

		ran, err = l.Once(ctx, key, job(false))
		require.True(t, ran, "a failed job runs again")
		require.NoError(t, err)

		for range 3 {
			ran, err = l.Once(ctx, key, job(false))
			require.False(t, ran)
			require.NoError(t, err)
		}
		require.Equal(t, 2, calls)
	})
}

func TestOncePanicWritesNoRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t))
		key := uniqueKey(t)
		type boom struct{}
		func() {
			defer func() {
				require.Equal(t, boom{}, recover(), "the panic goes on after the release")
			}()
			_, _ = l.Once(ctx, key, func(context.Context) error { panic(boom{}) })
			t.Error("Once returned instead of panicking")
		}()
		requireNoRecord(t, raw, l, key)
		require.Zero(t, raw.Exists(ctx, key).Val(), "not released on panic")

		ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
		require.True(t, ran)
		require.NoError(t, err)
	})
}

func TestOnceLostLockWritesNoRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("lease noticed", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t), locksmith.WithRenewInterval(10*time.Millisecond))
			ran, err := l.Once(ctx, key, func(ctx context.Context) error {
				require.NoError(t, raw.Del(ctx, key).Err())
				<-ctx.Done()
				return nil // fn ignores the loss; Once must not
			})
			require.True(t, ran)
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			requireNoRecord(t, raw, l, key)
		})
		t.Run("found at completion", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t))
			ran, err := l.Once(ctx, key, func(ctx context.Context) error {
				// Gone before the first renewal could notice: only the
				// completion script can tell.
				return raw.Del(ctx, key).Err()
			})
			require.True(t, ran)
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			require.ErrorIs(t, err, locksmith.ErrNotHeld)
			requireNoRecord(t, raw, l, key)
		})
		t.Run("taken over", func(t *testing.T) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			l := newLocker(t, b.client(t))
			ran, err := l.Once(ctx, key, func(ctx context.Context) error {
				// The lock expired and another process took it.
				return raw.Set(ctx, key, "next-holder", time.Minute).Err()
			})
			require.True(t, ran)
			require.ErrorIs(t, err, locksmith.ErrLockLost)
			requireNoRecord(t, raw, l, key)
			require.Equal(t, "next-holder", raw.Get(ctx, key).Val(), "the next holder's lock is untouched")
		})
	})
}

func TestOnceRecordExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithDoneTTL(200*time.Millisecond))
		key := uniqueKey(t)
		var calls int
		job := func(context.Context) error { calls++; return nil }

		ran, err := l.Once(ctx, key, job)
		require.True(t, ran)
		require.NoError(t, err)
		ttl := raw.PTTL(ctx, doneKey(key)).Val()
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, 200*time.Millisecond)
		ran, err = l.Once(ctx, key, job)
		require.False(t, ran)
		require.NoError(t, err)

		b.elapse(t, 250*time.Millisecond)
		requireNoRecord(t, raw, l, key)
		ran, err = l.Once(ctx, key, job)
		require.True(t, ran, "the job runs again once its record has expired")
		require.NoError(t, err)
		require.Equal(t, 2, calls)
	})
}

func TestOnceRetentionOverride(t *testing.T) {
	m := miniredis.RunT(t)
	c := newClient(t, &redis.Options{Addr: m.Addr()}, nil)
	l := newLocker(t, c, locksmith.WithDoneTTL(time.Minute))
	_, err := l.Once(t.Context(), "a", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, time.Minute, m.TTL(doneKey("a")))
	_, err = l.Once(t.Context(), "b", func(context.Context) error { return nil }, locksmith.WithDoneTTL(time.Hour+1500*time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, time.Hour+time.Millisecond, m.TTL(doneKey("b")), "per call, truncated to milliseconds")
}

func TestCompleted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		l := newLocker(t, b.client(t), locksmith.WithPrefix("jobs:"))
		key := uniqueKey(t)

		c, ok, err := l.Completed(ctx, key)
		require.NoError(t, err)
		require.False(t, ok, "no record before the job ran")
		require.Zero(t, c)

		before := time.Now()
		var token string
		_, err = l.Once(ctx, key, func(ctx context.Context) error {
			token = locksmith.LockFromContext(ctx).Token()
			return nil
		})
		require.NoError(t, err)
		c, ok, err = l.Completed(ctx, key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, token, c.Token, "the record names the lock the job ran under")
		require.WithinRange(t, c.At, before, time.Now())
		require.Equal(t, time.UTC, c.At.Location())
		host, _ := os.Hostname()
		require.Equal(t, fmt.Sprintf("%s:%d", host, os.Getpid()), c.By)
		require.Equal(t, int64(1), raw.Exists(ctx, names(t, "jobs:", key).Done).Val(), "the record is at Keys(key).Done")
		require.Zero(t, c.Fence, "no fencing, no fence")

		// With fencing the record keeps the fence of the run.
		fenced := uniqueKey(t)
		var fence int64
		_, err = l.Once(ctx, fenced, func(ctx context.Context) error {
			fence = locksmith.LockFromContext(ctx).Fence()
			return nil
		}, locksmith.WithFencing())
		require.NoError(t, err)
		c, ok, err = l.Completed(ctx, fenced)
		require.NoError(t, err)
		require.True(t, ok)
		require.Positive(t, fence)
		require.Equal(t, fence, c.Fence)

		// A lock key with a hash tag keeps it in the record's name.
		tagged := "{" + uniqueKey(t) + "}:ship"
		_, err = l.Once(ctx, tagged, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, int64(1), raw.Exists(ctx, "jobs:~done:"+tagged).Val())
		_, ok, err = l.Completed(ctx, tagged)
		require.NoError(t, err)
		require.True(t, ok)

		// Something else at the record's key: Once takes it as done, Done
		// cannot read it.
		other := uniqueKey(t)
		require.NoError(t, raw.Set(ctx, names(t, "jobs:", other).Done, "not json", time.Minute).Err())
		_, _, err = l.Completed(ctx, other)
		require.Error(t, err)
		ran, err := l.Once(ctx, other, func(context.Context) error { return nil })
		require.False(t, ran)
		require.NoError(t, err)
	})
}

func TestOnceRoundTrips(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		cnt := &counter{}
		l := newLocker(t, b.client(t, cnt))
		job := func(context.Context) error { return nil }
		// Load the scripts, so that the counts are those of EVALSHA
		// without a NOSCRIPT fallback.
		_, err := l.Once(ctx, uniqueKey(t), job)
		require.NoError(t, err)

		key := uniqueKey(t)
		cnt.reset()
		ran, err := l.Once(ctx, key, job)
		require.True(t, ran)
		require.NoError(t, err)
		require.Equal(t, []string{"get", "set", "get", "evalsha"}, cnt.names,
			"read the record, obtain, read it again, complete")

		cnt.reset()
		ran, err = l.Once(ctx, key, job)
		require.False(t, ran)
		require.NoError(t, err)
		require.Equal(t, []string{"get"}, cnt.names, "a completed job costs one read")

		cnt.reset()
		_, _, err = l.Completed(ctx, key)
		require.NoError(t, err)
		require.Equal(t, []string{"get"}, cnt.names)
	})
}

func TestOnceResentCompletion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		f := &fault{}
		l := newLocker(t, b.client(t, f))
		key := uniqueKey(t)
		// Every script call is delivered twice, as by a client that resends
		// a command whose reply it lost: the second completion finds the
		// lock gone, and must recognise its own record.
		f.resend.Store(true)
		ran, err := l.Once(ctx, key, func(context.Context) error { return nil })
		f.resend.Store(false)
		require.True(t, ran)
		require.NoError(t, err)
		_, ok, err := l.Completed(ctx, key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Zero(t, raw.Exists(ctx, key).Val())
	})
}

func TestOnceNotObtained(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		l := newLocker(t, b.client(t))
		holder, err := l.Obtain(ctx, key)
		require.NoError(t, err)

		job := func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		}
		ran, err := l.Once(ctx, key, job)
		require.False(t, ran)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)

		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		ran, err = l.Once(wctx, key, job, locksmith.WithRetry(locksmith.LinearBackoff(10*time.Millisecond)))
		require.False(t, ran)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requireNoRecord(t, raw, l, key)
		require.NoError(t, holder.Release(ctx))

		// A context that is already done sends nothing.
		cnt := &counter{}
		done, cancel2 := context.WithCancel(ctx)
		cancel2()
		ran, err = newLocker(t, b.client(t, cnt)).Once(done, key, job)
		require.False(t, ran)
		require.ErrorIs(t, err, locksmith.ErrNotObtained)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, cnt.count())
	})
}

func TestOnceBadInputSendsNothing(t *testing.T) {
	m := miniredis.RunT(t)
	cnt := &counter{}
	c := newClient(t, &redis.Options{Addr: m.Addr()}, []redis.Hook{cnt})
	ctx := t.Context()
	good := newLocker(t, c)
	fn := func(context.Context) error {
		t.Error("fn ran")
		return nil
	}
	cases := []struct {
		name string
		l    *locksmith.Locker
		key  string
		opts []locksmith.Option
	}{
		{"empty key", good, "", nil},
		{"zero done TTL", good, "k", []locksmith.Option{locksmith.WithDoneTTL(0)}},
		{"negative done TTL", good, "k", []locksmith.Option{locksmith.WithDoneTTL(-time.Hour)}},
		{"done TTL under 1ms", good, "k", []locksmith.Option{locksmith.WithDoneTTL(999 * time.Microsecond)}},
		{"bad lock option", good, "k", []locksmith.Option{locksmith.WithTTL(0)}},
		{"zero option", good, "k", []locksmith.Option{{}}},
		{"bad default done TTL", newLocker(t, c, locksmith.WithDoneTTL(0)), "k", nil},
		{"nil client", newLocker(t, nil), "k", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran, err := tc.l.Once(ctx, tc.key, fn, tc.opts...)
			require.False(t, ran)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.NotErrorIs(t, err, locksmith.ErrNotObtained)
			_, ok, err := tc.l.Completed(ctx, tc.key, tc.opts...)
			require.False(t, ok)
			require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
			require.Zero(t, cnt.count(), "bad input must send nothing")
		})
	}
	t.Run("nil fn", func(t *testing.T) {
		ran, err := good.Once(ctx, "k", nil)
		require.False(t, ran)
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
		require.Zero(t, cnt.count())
	})
	t.Run("done TTL is not a lock option", func(t *testing.T) {
		// Other calls ignore it, but still reject a bad one.
		lk, err := good.Obtain(ctx, "k", locksmith.WithDoneTTL(time.Hour))
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
		_, err = good.Obtain(ctx, "k", locksmith.WithDoneTTL(0))
		require.ErrorIs(t, err, locksmith.ErrInvalidArgument)
	})
}

// TestOnceOnCluster runs Once on a Redis Cluster, which refuses a script
// whose keys are in different slots (CROSSSLOT), even when one node serves
// both.
func TestOnceOnCluster(t *testing.T) {
	ctx := t.Context()
	cc := redistest.SharedCluster(t).Client(t)
	// The check is real: a script over two keys of different slots fails.
	err := cc.Eval(ctx, "return 1", []string{"a", "b"}).Err()
	require.ErrorContains(t, err, "CROSSSLOT")

	// The cluster is shared: a prefix of its own keeps the records of
	// earlier runs (-count) out of this one.
	l := newLocker(t, cc, locksmith.WithPrefix(uniqueKey(t)+":"), locksmith.WithFencing())
	for _, key := range braceKeys {
		requireOnceRunsOnce(t, l, key)
	}
}
