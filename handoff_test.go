package locksmith_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// The tests of direct handoff (see handoff.go) look at the handoff queue
// and the release announcements from outside, with a client of their own.

// queueKey returns the handoff queue of the lock on key, without a prefix.
func queueKey(key string) string {
	return plainNames(key).Queue
}

// entryToken returns the token of a handoff queue entry,
// "<ttl ms> <0|1 fencing> <token>".
func entryToken(entry string) string {
	f := strings.SplitN(entry, " ", 3)
	return f[len(f)-1]
}

// queueEntries returns the entries of rkey's handoff queue, first in line
// first. An entry is stored as one member, scored with when it lapses, or
// as two: "a:" and the entry, scored with when it arrived, and "l:" and
// the entry, scored with minus when it lapses.
func queueEntries(t *testing.T, raw *redis.Client, rkey string) []string {
	t.Helper()
	members, err := raw.ZRange(t.Context(), queueKey(rkey), 0, -1).Result()
	require.NoError(t, err)
	var arrived []string
	for _, m := range members {
		if e, ok := strings.CutPrefix(m, "a:"); ok {
			arrived = append(arrived, e)
		}
	}
	if len(arrived) > 0 {
		return arrived
	}
	return members
}

// waitQueued waits until rkey's handoff queue holds n entries.
func waitQueued(t *testing.T, raw *redis.Client, rkey string, n int) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		return len(queueEntries(t, raw, rkey)) == n
	}, "%d entries in the handoff queue of %q", n, rkey)
}

// scripts is a hook that counts the script calls a client completed
// without error (a NOSCRIPT answer, resent as EVAL, counts once). A
// waiter's attempts are script calls, so once a waiter's Locker has
// completed two, both its first attempt, which queued it, and the attempt
// it makes when its subscription is confirmed, which renews its entry,
// have been executed: nothing moves its entry again before the renewal
// due two seconds later.
type scripts struct{ n atomic.Int64 }

// checked makes l's first-call permission check (see Locker.Check) now,
// and then zeroes the script count n, so that counts start with the
// Locker's locking calls.
func checked(t *testing.T, l *locksmith.Locker, n *atomic.Int64) *locksmith.Locker {
	t.Helper()
	require.NoError(t, l.Check(t.Context()))
	n.Store(0)
	return l
}

func (s *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.record(cmd, err)
		return err
	}
}

func (s *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			s.record(cmd, cmd.Err())
		}
		return err
	}
}

// record counts cmd if it is a script call that succeeded. A hook sees
// the error of its command as returned by next: go-redis may set it on
// the command only later.
func (s *scripts) record(cmd redis.Cmder, err error) {
	if name := strings.ToLower(cmd.Name()); err == nil && (name == "evalsha" || name == "eval") {
		s.n.Add(1)
	}
}

// wait waits until the clients s hooks have completed n script calls.
func (s *scripts) wait(t *testing.T, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool { return s.n.Load() >= n }, "%d script calls", n)
}

// obtained is the outcome of an Obtain call run in the background.
type obtained struct {
	lk  *locksmith.Lock
	err error
	at  time.Time // when Obtain returned
	// sent is how many requests the caller's counter had counted when
	// Obtain returned; zero without a counter.
	sent int
}

// obtainInBackground runs l.Obtain in a goroutine that ends with it, and
// delivers the outcome on the returned channel. cnt, if not nil, is read
// as soon as Obtain returns. ctx should end with the test, so that a
// waiter the test does not get to ends too.
func obtainInBackground(ctx context.Context, l *locksmith.Locker, cnt *counter, key string, opts ...locksmith.Option) <-chan obtained {
	got := make(chan obtained, 1)
	go func() {
		lk, err := l.Obtain(ctx, key, opts...)
		res := obtained{lk: lk, err: err, at: time.Now()}
		if cnt != nil {
			res.sent = cnt.count()
		}
		got <- res
	}()
	return got
}

// receive returns the outcome from got, failing t if it takes over 5s.
func receive(t *testing.T, got <-chan obtained, what string) obtained {
	t.Helper()
	select {
	case res := <-got:
		return res
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Obtain did not return within 5s", what)
		return obtained{}
	}
}

// subscribeReleases subscribes to the announcements of rkey's releases,
// and returns once the subscription is confirmed.
func subscribeReleases(t *testing.T, raw *redis.Client, rkey string) *redis.PubSub {
	t.Helper()
	ps := raw.Subscribe(t.Context(), names(t, "", rkey).Channel)
	t.Cleanup(func() { _ = ps.Close() })
	msg, err := ps.ReceiveTimeout(t.Context(), 5*time.Second)
	require.NoError(t, err)
	require.IsType(t, &redis.Subscription{}, msg)
	return ps
}

// nextAnnouncement returns the payload of the next release announced on ps.
func nextAnnouncement(t *testing.T, ps *redis.PubSub) string {
	t.Helper()
	msg, err := ps.ReceiveTimeout(t.Context(), 5*time.Second)
	require.NoError(t, err, "no release announced")
	m, ok := msg.(*redis.Message)
	require.True(t, ok, "got %T, want a message", msg)
	return m.Payload
}

// holdLong takes key for a minute, through a Locker of its own on c with
// opts as its defaults.
func holdLong(t *testing.T, c redis.UniversalClient, key string, opts ...locksmith.Option) *locksmith.Lock {
	t.Helper()
	lk, err := newLocker(t, c, opts...).Obtain(t.Context(), key, locksmith.WithTTL(time.Minute))
	require.NoError(t, err)
	return lk
}

// requireFree checks that nothing holds or waits for the lock at rkey.
func requireFree(t *testing.T, raw *redis.Client, rkey string) {
	t.Helper()
	ctx := t.Context()
	require.ErrorIs(t, raw.Get(ctx, rkey).Err(), redis.Nil, "the lock is still held")
	require.Zero(t, raw.Exists(ctx, queueKey(rkey)).Val(), "entries left in the handoff queue: %v",
		raw.ZRange(ctx, queueKey(rkey), 0, -1).Val())
}

func TestHandoffSendsNoRequest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct{ name, key string }{
			{"plain key", uniqueKey(t)},
			{"hash tag", "{" + uniqueKey(t) + "}:x"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				raw := b.client(t)
				const ttl = 10 * time.Second
				holder, err := newLocker(t, b.client(t)).Obtain(ctx, tc.key, locksmith.WithTTL(time.Minute))
				require.NoError(t, err)
				announced := subscribeReleases(t, raw, tc.key)

				cnt, done := &counter{}, &scripts{}
				l := checked(t, newLocker(t, b.client(t, cnt, done), locksmith.WithTTL(ttl)), &done.n)
				cnt.reset()
				called := time.Now()
				got := obtainInBackground(ctx, l, cnt, tc.key, locksmith.WithRetry(forever))
				waitQueued(t, raw, tc.key, 1)
				done.wait(t, 2)
				require.True(t, strings.HasPrefix(queueEntries(t, raw, tc.key)[0], "10000 0 "),
					"entry %q", queueEntries(t, raw, tc.key))

				before := cnt.count()
				require.NoError(t, holder.Release(ctx))
				res := receive(t, got, "waiter")
				require.NoError(t, res.err)
				lk := res.lk
				require.Equal(t, before, res.sent,
					"the waiter sent requests after the release (in %v): a handoff needs none", res.at.Sub(called))
				require.Equal(t, "10000 0 "+lk.Token(), nextAnnouncement(t, announced))

				require.Equal(t, lk.Token(), raw.Get(ctx, tc.key).Val(), "the key holds the waiter's token")
				pttl := raw.PTTL(ctx, tc.key).Val()
				require.Positive(t, pttl)
				require.LessOrEqual(t, pttl, ttl)
				require.Zero(t, raw.Exists(ctx, queueKey(tc.key)).Val(), "the handoff took the only entry")
				require.True(t, lk.Deadline().After(res.at), "deadline %v is past", lk.Deadline())
				require.False(t, lk.Deadline().After(called.Add(ttl)),
					"validity must count from the first queued attempt: deadline %v, Obtain called at %v", lk.Deadline(), called)

				// The handle is a lock like any other.
				ttlLeft, err := lk.TTL(ctx)
				require.NoError(t, err)
				require.Positive(t, ttlLeft)
				require.NoError(t, lk.Release(ctx))
				require.Equal(t, "", nextAnnouncement(t, announced))
				requireFree(t, raw, tc.key)
			})
		}
	})
}

func TestHandoffTakesNextFence(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		holder := holdLong(t, b.client(t), key, locksmith.WithFencing())
		require.Positive(t, holder.Fence())
		announced := subscribeReleases(t, raw, key)

		l := newLocker(t, b.client(t), locksmith.WithFencing(), locksmith.WithTTL(10*time.Second))
		got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 1)
		require.True(t, strings.HasPrefix(queueEntries(t, raw, key)[0], "10000 1 "), "entry %q", queueEntries(t, raw, key))

		require.NoError(t, holder.Release(ctx))
		res := receive(t, got, "waiter")
		require.NoError(t, res.err)
		lk := res.lk
		require.Greater(t, lk.Fence(), holder.Fence(), "the handed-over lock's fence")
		counter, err := raw.Get(ctx, names(t, "", key).Fence).Int64()
		require.NoError(t, err)
		require.Equal(t, counter, lk.Fence(), "the handoff took the counter's next value")
		require.Equal(t, fmt.Sprintf("10000 %d %s", lk.Fence(), lk.Token()), nextAnnouncement(t, announced))
		require.NoError(t, lk.Release(ctx))

		next, err := l.Obtain(ctx, key)
		require.NoError(t, err)
		require.Greater(t, next.Fence(), lk.Fence())
		require.NoError(t, next.Release(ctx))
	})
}

// TestHandoffFirstComeFirstServed queues one waiter from each of three
// Lockers and releases the lock three times in quick succession, well
// within the two seconds before the first waiter renews its entry
// (TestHandoffOrderSurvivesRenewal checks the order across renewals).
func TestHandoffFirstComeFirstServed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		holder := holdLong(t, b.client(t), key)

		const waiters = 3
		var (
			got    [waiters]<-chan obtained
			tokens [waiters]string
		)
		for i := range waiters {
			done := &scripts{}
			l := checked(t, newLocker(t, b.client(t, done), locksmith.WithTTL(10*time.Second)), &done.n)
			got[i] = obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(forever))
			waitQueued(t, raw, key, i+1)
			done.wait(t, 2)
			entries := queueEntries(t, raw, key)
			for j := range i {
				require.Equal(t, tokens[j], entryToken(entries[j]), "queue %q after waiter %d joined", entries, i)
			}
			tokens[i] = entryToken(entries[i])
		}

		release := holder.Release
		for i := range waiters {
			require.NoError(t, release(ctx))
			res := receive(t, got[i], fmt.Sprintf("waiter %d", i))
			require.NoError(t, res.err, "waiter %d", i)
			require.Equal(t, tokens[i], res.lk.Token(), "waiter %d", i)
			require.Equal(t, tokens[i], raw.Get(ctx, key).Val(), "waiter %d", i)
			for j := i + 1; j < waiters; j++ {
				select {
				case res := <-got[j]:
					t.Fatalf("waiter %d returned (%v) while waiter %d held the lock", j, res.err, i)
				default:
				}
			}
			release = res.lk.Release
		}
		require.NoError(t, release(ctx))
		requireFree(t, raw, key)
	})
}

// TestHandoffOrderSurvivesRenewal checks that a waiter keeps its place in
// the handoff queue when it renews its entry. W1 queues a second before
// W2; W1 renews its entry about two seconds after queueing, W2 a second
// after that. A release in between must still hand the lock to W1.
func TestHandoffOrderSurvivesRenewal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		holder := holdLong(t, b.client(t), key)

		first, second := &scripts{}, &scripts{}
		got1 := obtainInBackground(ctx, checked(t, newLocker(t, b.client(t, first)), &first.n), nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 1)
		first.wait(t, 2)
		token1 := entryToken(queueEntries(t, raw, key)[0])
		time.Sleep(time.Second)
		got2 := obtainInBackground(ctx, checked(t, newLocker(t, b.client(t, second)), &second.n), nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 2)
		second.wait(t, 2)
		token2 := entryToken(queueEntries(t, raw, key)[1])

		// W1 renews; W2 does not for another second.
		first.wait(t, 3)
		require.Equal(t, int64(2), second.n.Load(), "W2 renewed too early for the test to tell")
		entries := queueEntries(t, raw, key)
		require.NoError(t, holder.Release(ctx))
		// The release sets the key to the head's token in the same step.
		require.Equal(t, token1, raw.Get(ctx, key).Val(),
			"the lock went to W2 (%s), queued a second after W1 (%s); the queue after W1's renewal: %q", token2, token1, entries)

		res := receive(t, got1, "W1")
		require.NoError(t, res.err)
		require.NoError(t, res.lk.Release(ctx))
		res = receive(t, got2, "W2")
		require.NoError(t, res.err)
		require.NoError(t, res.lk.Release(ctx))
		requireFree(t, raw, key)
	})
}

func TestHandoffWaiterThatGivesUpWithdraws(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry locksmith.RetryStrategy
		// cancel says whether the waiter gives up because its context is
		// cancelled, rather than because its strategy runs out.
		cancel bool
	}{
		{"context cancelled", forever, true},
		{"strategy exhausted", locksmith.LimitRetry(locksmith.LinearBackoff(300*time.Millisecond), 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				ctx := t.Context()
				raw := b.client(t)
				key := uniqueKey(t)
				holder := holdLong(t, b.client(t), key)
				announced := subscribeReleases(t, raw, key)

				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				got := obtainInBackground(wctx, newLocker(t, b.client(t)), nil, key, locksmith.WithRetry(tc.retry))
				if tc.cancel {
					waitQueued(t, raw, key, 1)
					cancel()
				}
				// Its first attempt found the lock taken, so it was queued.
				res := receive(t, got, "waiter")
				require.ErrorIs(t, res.err, locksmith.ErrNotObtained)
				if tc.cancel {
					require.ErrorIs(t, res.err, context.Canceled)
				} else {
					require.NotErrorIs(t, res.err, context.Canceled)
				}
				require.Zero(t, raw.Exists(ctx, queueKey(key)).Val(), "the waiter left its entry behind: %q",
					queueEntries(t, raw, key))

				require.NoError(t, holder.Release(ctx))
				require.Equal(t, "", nextAnnouncement(t, announced), "the release handed the lock over")
				requireFree(t, raw, key)
			})
		})
	}
}

// TestHandoffToDepartingWaiterStrandsNothing races a waiter giving up
// against the release that may hand it the lock: giving up first,
// releasing first, and both at once. Whatever the waiter made of it, the
// lock must be free again, or passed on to the next waiter, at once: not
// held for its 10s TTL by a waiter that left.
func TestHandoffToDepartingWaiterStrandsNothing(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name string
		// behind is where a second waiter waits, behind the one that
		// leaves: nowhere, in another Locker, or in the same Locker.
		behind string
	}{
		{"alone", ""},
		{"with a waiter behind in another Locker", "other"},
		{"with a waiter behind in the same Locker", "same"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				ctx := t.Context()
				raw := b.client(t)
				holders := newLocker(t, b.client(t), locksmith.WithTTL(ttl))
				waiters := newLocker(t, b.client(t), locksmith.WithTTL(ttl))
				others := newLocker(t, b.client(t), locksmith.WithTTL(ttl))
				var handed, gaveUp int
				for i := range 50 {
					key := uniqueKey(t)
					holder, err := holders.Obtain(ctx, key)
					require.NoError(t, err)
					wctx, cancel := context.WithCancel(ctx)
					got := obtainInBackground(wctx, waiters, nil, key, locksmith.WithRetry(forever))
					waitQueued(t, raw, key, 1)
					// The waiter behind can only be woken by a handoff or
					// an announcement.
					var next <-chan obtained
					switch tc.behind {
					case "other":
						next = obtainInBackground(ctx, others, nil, key, locksmith.WithRetry(forever))
						waitQueued(t, raw, key, 2)
					case "same":
						// It joins its Locker's queue without a request,
						// and queues for a handoff once it is the head.
						next = obtainInBackground(ctx, waiters, nil, key, locksmith.WithRetry(forever))
						time.Sleep(20 * time.Millisecond)
					}

					release := func() {
						if err := holder.Release(ctx); err != nil {
							t.Errorf("iteration %d: holder's Release: %v", i, err)
						}
					}
					switch i % 3 {
					case 0:
						cancel()
						release()
					case 1:
						release()
						cancel()
					default:
						var wg sync.WaitGroup
						wg.Add(2)
						go func() { defer wg.Done(); cancel() }()
						go func() { defer wg.Done(); release() }()
						wg.Wait()
					}
					res := receive(t, got, fmt.Sprintf("iteration %d: departing waiter", i))
					if res.err == nil {
						handed++
						require.NoError(t, res.lk.Release(ctx), "iteration %d", i)
					} else {
						gaveUp++
						require.ErrorIs(t, res.err, locksmith.ErrNotObtained, "iteration %d", i)
					}

					var lk *locksmith.Lock
					if next != nil {
						res := receive(t, next, fmt.Sprintf("iteration %d (case %d): the waiter behind", i, i%3))
						require.NoError(t, res.err, "iteration %d: the waiter behind", i)
						lk = res.lk
					} else {
						octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
						lk, err = others.Obtain(octx, key, locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
						ocancel()
						require.NoError(t, err, "iteration %d (case %d): the lock was stranded, held by %q",
							i, i%3, raw.Get(ctx, key).Val())
					}
					require.Equal(t, lk.Token(), raw.Get(ctx, key).Val(), "iteration %d", i)
					require.NoError(t, lk.Release(ctx), "iteration %d", i)
					requireFree(t, raw, key)
				}
				t.Logf("the departing waiter got the lock %d times and gave up %d times", handed, gaveUp)
			})
		})
	}
}

// TestHandoffMissedAnnouncement hands the lock over while the waiter's
// subscription is down: the waiter must still take the lock, when its
// Locker resubscribes and it tries again, with the fence the handoff took.
func TestHandoffMissedAnnouncement(t *testing.T) {
	srv := redistest.New(t)
	ctx := t.Context()
	raw := srv.Client(t)
	key := uniqueKey(t)
	holder := holdLong(t, srv.Client(t), key, locksmith.WithFencing())

	done := &scripts{}
	l := checked(t, newLocker(t, newClient(t, srv.Options(), []redis.Hook{done}), locksmith.WithFencing(), locksmith.WithTTL(10*time.Second)), &done.n)
	got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(forever))
	waitQueued(t, raw, key, 1)
	done.wait(t, 2)
	token := entryToken(queueEntries(t, raw, key)[0])

	require.NoError(t, raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	require.NoError(t, holder.Release(ctx))
	require.Equal(t, token, raw.Get(ctx, key).Val(), "handed over")
	res := receive(t, got, "waiter")
	require.NoError(t, res.err)
	require.Equal(t, token, res.lk.Token())
	fence, err := raw.Get(ctx, names(t, "", key).Fence).Int64()
	require.NoError(t, err)
	require.Equal(t, fence, res.lk.Fence(), "the fence the handoff took")
	require.Greater(t, res.lk.Fence(), holder.Fence())
	require.True(t, res.lk.Deadline().After(time.Now()))
	// Whether the announcement was missed depends on how soon the Locker
	// resubscribed: after the release, it tried again.
	t.Logf("the waiter made %d attempts", done.n.Load())
	require.NoError(t, res.lk.Release(ctx))
	requireFree(t, raw, key)
}

// TestHandoffSkipsLapsedEntries queues a waiter whose Locker then dies
// (its client is closed, so it can neither renew its entry nor withdraw
// it) and lets its entry lapse. A release must not hand the lock to it:
// it deletes the lock when nobody else waits, and hands it to the live
// waiter behind otherwise.
func TestHandoffSkipsLapsedEntries(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		// alone has only the dead waiter; behind has a live one too.
		alone, behind := uniqueKey(t), uniqueKey(t)
		holders := newLocker(t, b.client(t), locksmith.WithTTL(time.Minute))
		holderAlone, err := holders.Obtain(ctx, alone)
		require.NoError(t, err)
		holderBehind, err := holders.Obtain(ctx, behind)
		require.NoError(t, err)

		deadClient := b.client(t)
		dead := newLocker(t, deadClient, locksmith.WithTTL(10*time.Second))
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		deadAlone := obtainInBackground(dctx, dead, nil, alone, locksmith.WithRetry(forever))
		waitQueued(t, raw, alone, 1)
		deadBehind := obtainInBackground(dctx, dead, nil, behind, locksmith.WithRetry(forever))
		waitQueued(t, raw, behind, 1)
		deadToken := entryToken(queueEntries(t, raw, behind)[0])
		live := obtainInBackground(ctx, newLocker(t, b.client(t), locksmith.WithTTL(10*time.Second)), nil, behind,
			locksmith.WithRetry(forever))
		waitQueued(t, raw, behind, 2)

		require.NoError(t, deadClient.Close())
		cancel()
		require.Error(t, receive(t, deadAlone, "dead waiter").err)
		require.Error(t, receive(t, deadBehind, "dead waiter").err)
		// Its entries stay, and renew no more. The queue of alone would
		// lapse with its only entry: keep it.
		died, err := raw.Time(ctx).Result()
		require.NoError(t, err)
		require.Len(t, queueEntries(t, raw, alone), 1)
		require.Equal(t, deadToken, entryToken(queueEntries(t, raw, behind)[0]))
		require.True(t, raw.Persist(ctx, queueKey(alone)).Val())

		time.Sleep(5 * time.Second)
		eventually(t, 5*time.Second, func() bool {
			return raw.Time(ctx).Val().After(died.Add(5*time.Second + 10*time.Millisecond))
		}, "the server's clock passing the dead waiter's entries' lapse")
		require.Len(t, queueEntries(t, raw, alone), 1, "the lapsed entry is still there")

		announced := subscribeReleases(t, raw, alone)
		require.NoError(t, holderAlone.Release(ctx))
		require.Equal(t, "", nextAnnouncement(t, announced), "handed over to a lapsed entry")
		requireFree(t, raw, alone)

		require.NoError(t, holderBehind.Release(ctx))
		res := receive(t, live, "the live waiter")
		require.NoError(t, res.err)
		require.Equal(t, res.lk.Token(), raw.Get(ctx, behind).Val())
		require.NoError(t, res.lk.Release(ctx))
		requireFree(t, raw, behind)
	})
}

// TestHandoffSkipsFencedEntryWithoutCounter checks that a release that
// does not know the fence counter (its lock was obtained without fencing)
// does not hand the lock to a waiter that wants a fencing token: it
// releases the lock, and the waiter takes it by its own attempt.
func TestHandoffSkipsFencedEntryWithoutCounter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		holder := holdLong(t, b.client(t), key)
		announced := subscribeReleases(t, raw, key)

		got := obtainInBackground(ctx, newLocker(t, b.client(t), locksmith.WithFencing()), nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 1)
		require.NoError(t, holder.Release(ctx))
		require.Equal(t, "", nextAnnouncement(t, announced))
		res := receive(t, got, "fenced waiter")
		require.NoError(t, res.err)
		require.Positive(t, res.lk.Fence())
		fence, err := raw.Get(ctx, names(t, "", key).Fence).Int64()
		require.NoError(t, err)
		require.Equal(t, fence, res.lk.Fence())
		require.NoError(t, res.lk.Release(ctx))
		requireFree(t, raw, key)
	})
}

// TestHandoffNotQueued checks that the waiters handoffs cannot serve are
// never queued: those of a quorum, and those that wait for replicas.
// TestHandoffOnCluster checks that handoffs work on Redis Cluster, where
// scripts that name the queue go to the slot's master directly (see
// viaMaster), for keys with and without a hash tag.
func TestHandoffOnCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	for _, key := range []string{uniqueKey(t), "{" + uniqueKey(t) + "}:x", uniqueKey(t) + "}x"} {
		t.Run(key, func(t *testing.T) {
			ctx := t.Context()
			raw := cl.Client(t)
			holder := holdLong(t, cl.Client(t), key, locksmith.WithFencing())

			// Count what reaches the nodes: scripts that name the queue
			// bypass the cluster client's own hooks.
			cnt, done := &counter{}, &scripts{}
			wc := cl.Client(t)
			wc.OnNewNode(func(c *redis.Client) { c.AddHook(cnt); c.AddHook(done) })
			wl := newLocker(t, wc, locksmith.WithFencing())
			checked(t, wl, &done.n)
			cnt.reset()
			got := obtainInBackground(ctx, wl, cnt, key, locksmith.WithRetry(forever))
			// Its first attempt, and the one when its subscription is
			// confirmed; then it waits for the release.
			done.wait(t, 2)
			before := cnt.count()
			require.NoError(t, holder.Release(ctx))
			res := receive(t, got, "cluster waiter")
			require.NoError(t, res.err)
			require.Equal(t, before, res.sent, "the waiter sent requests after the release: a handoff needs none")
			require.Equal(t, res.lk.Token(), raw.Get(ctx, key).Val())
			require.Greater(t, res.lk.Fence(), holder.Fence())
			require.NoError(t, res.lk.Release(ctx))
		})
	}
}

func TestHandoffNotQueued(t *testing.T) {
	t.Run("quorum", func(t *testing.T) {
		q := newQuorum(t)
		ctx := t.Context()
		key := uniqueKey(t)
		holder, err := newQuorumLocker(t, q.clients(t), locksmith.WithTTL(time.Minute)).Obtain(ctx, key)
		require.NoError(t, err)

		done := &scripts{}
		var cs []redis.UniversalClient
		for _, s := range q.servers {
			opt := s.Options()
			opt.ContextTimeoutEnabled = true
			cs = append(cs, newClient(t, opt, []redis.Hook{done}))
		}
		got := obtainInBackground(ctx, checked(t, newQuorumLocker(t, cs), &done.n), nil, key, locksmith.WithRetry(forever))
		// Two attempts on each master: the first, and the one when its
		// subscription is confirmed.
		done.wait(t, 2*int64(len(q.servers)))
		noQueue := func(when string) {
			t.Helper()
			for i, s := range q.servers {
				require.Zero(t, s.Client(t).Exists(ctx, queueKey(key)).Val(), "%s: master %d has a handoff queue", when, i)
			}
		}
		noQueue("while waiting")

		require.NoError(t, holder.Release(ctx))
		res := receive(t, got, "quorum waiter")
		require.NoError(t, res.err)
		// A master may have heard the waiter's attempt before the
		// holder's release: a majority is what counts.
		require.GreaterOrEqual(t, q.holders(t, key, res.lk.Token()), len(q.servers)/2+1)
		noQueue("after obtaining")
		require.NoError(t, res.lk.Release(ctx))
	})

	t.Run("replicas", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, b backend) {
			ctx := t.Context()
			raw := b.client(t)
			key := uniqueKey(t)
			holder := holdLong(t, b.client(t), key)
			defer holder.Release(ctx)

			done := &scripts{}
			wctx, cancel := context.WithCancel(ctx)
			got := obtainInBackground(wctx, checked(t, newLocker(t, b.client(t, done)), &done.n), nil, key,
				locksmith.WithRetry(forever), locksmith.WithReplicas(1, 10*time.Millisecond))
			done.wait(t, 2)
			require.Zero(t, raw.Exists(ctx, queueKey(key)).Val(), "a waiter for replicas was queued")
			cancel()
			res := receive(t, got, "waiter")
			require.ErrorIs(t, res.err, context.Canceled)
			require.Zero(t, raw.Exists(ctx, queueKey(key)).Val())
		})
	})
}

// TestHandoffAfterLongWaitRefreshes hands over a lock whose TTL is shorter
// than the waiter's wait: its validity, counted from the waiter's first
// attempt, has run out by the handoff, so the waiter must refresh the lock
// before returning it rather than return a lock it must consider lost.
func TestHandoffAfterLongWaitRefreshes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		const ttl = 600 * time.Millisecond
		holder := holdLong(t, b.client(t), key)

		called := time.Now()
		got := obtainInBackground(ctx, newLocker(t, b.client(t), locksmith.WithTTL(ttl)), nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 1)
		// Past the waiter's validity, well before its entry's renewal.
		time.Sleep(time.Until(called.Add(ttl + 200*time.Millisecond)))

		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		res := receive(t, got, "waiter")
		require.NoError(t, res.err)
		require.True(t, res.lk.Deadline().After(released),
			"deadline %v, before the release at %v: the lock was not refreshed", res.lk.Deadline(), released)
		require.Equal(t, res.lk.Token(), raw.Get(ctx, key).Val())
		require.NoError(t, res.lk.Release(ctx))
	})
}

// TestHandoffLeaseRenewsInTime checks that the lease of a lock handed over
// after a wait, whose validity counts from the waiter's first attempt and
// so starts shorter than a fresh lock's, renews before that validity runs
// out, also with a renewal interval longer than what is left of it.
func TestHandoffLeaseRenewsInTime(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		raw := b.client(t)
		key := uniqueKey(t)
		const ttl = time.Second
		holder := holdLong(t, b.client(t), key)

		l := newLocker(t, b.client(t), locksmith.WithTTL(ttl), locksmith.WithRenewInterval(800*time.Millisecond))
		called := time.Now()
		got := obtainInBackground(ctx, l, nil, key, locksmith.WithRetry(forever))
		waitQueued(t, raw, key, 1)
		// Less than half the TTL: the waiter does not refresh the lock
		// it is handed, which has about 600ms of validity left.
		time.Sleep(time.Until(called.Add(400 * time.Millisecond)))
		require.NoError(t, holder.Release(ctx))
		res := receive(t, got, "waiter")
		require.NoError(t, res.err)
		lk := res.lk
		require.True(t, lk.Deadline().Before(time.Now().Add(800*time.Millisecond)),
			"deadline %v: the test needs a handed-over lock with less validity than the renewal interval", lk.Deadline())

		lease := lk.Lease(ctx)
		// Past the first Deadline and the renewal interval.
		select {
		case <-lease.Done():
			t.Fatalf("lease ended: %v", context.Cause(lease))
		case <-time.After(1200 * time.Millisecond):
		}
		require.True(t, lk.Deadline().After(time.Now()), "the lock was renewed")
		require.NoError(t, lk.Release(ctx))
	})
}
