package locksmith_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// (In a file of its own: the fault proxy is Linux-only.)

// TestPermitHandedOverUnheard: a release that hands a permit to a queued
// waiter who never hears of it (its user may not subscribe; the release
// comes before its Locker's subscription is confirmed; the announcement
// is lost) does not leave the permit idle for its TTL, whichever of its
// Locker's waiters the permit went to. The waiters' first attempts are
// made to race, so that each leaves an entry of its own in the handoff
// queue and a release may hand the permit to one that is not the head of
// its Locker's queue. Every round must be over well within the permits'
// TTL; on the code before the fix the first such handoff waited it out.
func TestPermitHandedOverUnheard(t *testing.T) {
	srv := redistest.New(t)
	faultsOf := []unheardFault{
		{name: "no channel rights", clientOpts: func(t *testing.T) *redis.Options {
			user, _ := aclUser(t, srv, "~locksmith:*", "resetchannels", "+@all", "-@dangerous")
			return user.Options()
		}},
		{name: "released before the subscription is confirmed", proxied: true,
			beforeStart: func(p *faults.Proxy) {
				p.Hold(faults.ToServer, func(piece []byte) bool { return bytes.Contains(bytes.ToLower(piece), []byte("subscribe")) })
			},
			beforeRelease: func(t *testing.T, _ *faults.Proxy, admin *redis.Client, channel string, _ int) {
				require.Zero(t, admin.PubSubNumSub(t.Context(), channel).Val()[channel], "a waiter's Locker listens already")
			},
			afterRelease: func(p *faults.Proxy) { p.Heal() }},
		{name: "announcement lost", proxied: true,
			beforeRelease: func(t *testing.T, p *faults.Proxy, admin *redis.Client, channel string, lockers int) {
				waitSubscribed(t, admin, channel, int64(lockers))
				p.Hold(faults.ToClient, func(piece []byte) bool { return bytes.Contains(piece, []byte("\r\nmessage\r\n")) })
			},
			lost: true},
	}
	for _, f := range faultsOf {
		for _, layout := range []struct{ lockers, each int }{{1, 6}, {3, 2}} {
			t.Run(f.name+"/"+strings.Repeat("L", layout.lockers), func(t *testing.T) {
				for round := range 3 {
					f.round(t, srv, round, layout.lockers, layout.each)
				}
			})
		}
	}
}

// An unheardFault keeps a release's announcement from its waiters.
type unheardFault struct {
	name string
	// clientOpts, when set, gives the options of the waiters' clients.
	clientOpts func(t *testing.T) *redis.Options
	// proxied puts the waiters' clients behind a fault proxy, which
	// beforeStart arms before the waiters start, or beforeRelease once
	// they are queued, and afterRelease heals after the holder's
	// release.
	proxied       bool
	beforeStart   func(p *faults.Proxy)
	beforeRelease func(t *testing.T, p *faults.Proxy, admin *redis.Client, channel string, lockers int)
	afterRelease  func(p *faults.Proxy)
	// lost is set when the fault drops the announcements to the waiters'
	// Lockers, which listen: it must have held some back.
	lost bool
}

// round runs one round of TestPermitHandedOverUnheard: each of each
// goroutines on each of lockers Lockers takes the semaphore's one permit
// three times, starting as a holder releases it.
func (f unheardFault) round(t *testing.T, srv *redistest.Server, round, lockers, each int) {
	const (
		ttl   = 30 * time.Second
		turns = 3
	)
	admin := srv.Client(t)
	opt := srv.Options()
	if f.clientOpts != nil {
		opt = f.clientOpts(t)
	}
	var p *faults.Proxy
	if f.proxied {
		var err error
		p, err = faults.NewProxy(srv.Addr)
		require.NoError(t, err)
		defer func() { _ = p.Close() }()
		opt.Addr = p.Addr()
	}
	ctx, cancel := context.WithTimeout(t.Context(), ttl/3)
	defer cancel()
	key := uniqueKey(t)
	adminSem := newLocker(t, admin, locksmith.WithPrefix("locksmith:")).Semaphore(key, 1)
	holder, err := adminSem.Acquire(ctx, locksmith.WithTTL(ttl))
	require.NoError(t, err)

	var (
		ls  []*locksmith.Locker
		all = newTogether(lockers * each)
	)
	for range lockers {
		c := newClient(t, opt, nil)
		l := newLocker(t, c, locksmith.WithPrefix("locksmith:"))
		// Checks the user's rights and loads the scripts, before the
		// waiters' first attempts are held back.
		warm, err := l.Semaphore(key+"-warm", 1).Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		c.AddHook(all)
		ls = append(ls, l)
	}
	var (
		mu    sync.Mutex
		times []time.Time
		wg    sync.WaitGroup
		errs  = make(chan error, lockers*each)
	)
	if f.beforeStart != nil {
		f.beforeStart(p)
	}
	for _, l := range ls {
		sem := l.Semaphore(key, 1)
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range turns {
					lk, err := sem.Acquire(ctx, locksmith.WithTTL(ttl), locksmith.WithRetry(locksmith.LinearBackoff(20*time.Millisecond)))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					times = append(times, time.Now())
					mu.Unlock()
					if err := lk.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	// Each waiter's first attempt raced with the others': each left an
	// entry of its own (see SemaphoreStatus.Queued).
	eventually(t, 5*time.Second, func() bool {
		st, err := adminSem.Inspect(ctx)
		return err == nil && st.Queued == lockers*each
	}, "round %d: the %d waiters did not each queue", round, lockers*each)
	k, err := ls[0].Keys(key)
	require.NoError(t, err)
	if f.beforeRelease != nil {
		f.beforeRelease(t, p, admin, k.Channel, lockers)
	}
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	if f.afterRelease != nil {
		f.afterRelease(p)
	}
	wg.Wait()
	close(errs)
	if f.lost {
		require.Positive(t, p.HeldBack(faults.ToClient), "round %d: no announcement was held back", round)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	worst, last := time.Duration(0), released
	for _, at := range times {
		worst = max(worst, at.Sub(last))
		last = at
	}
	for err := range errs {
		t.Errorf("round %d: %v (a permit sat idle: %d of %d acquisitions, worst gap %v)", round, err, len(times), lockers*each*turns, worst)
	}
	t.Logf("round %d: %d acquisitions, worst gap %v", round, len(times), worst)
	for _, l := range ls {
		_ = l.Close()
	}
	if p != nil {
		p.Heal()
	}
}

// together is a hook that, once added to clients, holds back the first n
// scripts they send until all n are on their way, so that the first
// attempts of n waiters race.
type together struct {
	mu   sync.Mutex
	left int
	go_  chan struct{} // closed once n scripts arrived
}

func newTogether(n int) *together { return &together{left: n, go_: make(chan struct{})} }

func (a *together) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *together) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			a.mu.Lock()
			held := a.left > 0
			if held {
				a.left--
				if a.left == 0 {
					close(a.go_)
				}
			}
			a.mu.Unlock()
			if held {
				select {
				case <-a.go_:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (a *together) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
