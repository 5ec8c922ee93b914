package locksmith_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// sentCounter is a hook that counts everything a client does on the
// network: dials, commands and pipelined commands.
type sentCounter struct{ n atomic.Int64 }

func (c *sentCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Bits of the fuzzed flags: which options are given, and whether each goes
// to New (the Locker's defaults) or to Obtain (the one call).
const (
	fuzzTTL = 1 << iota
	fuzzTTLAtNew
	fuzzRenew
	fuzzRenewAtNew
	fuzzDrift
	fuzzDriftAtNew
	fuzzRetryAtNew
	fuzzPrefixAtNew
)

// Retry strategies, chosen by the fuzzed selector modulo fuzzRetryKinds.
const (
	retryNone        = iota // no WithRetry option
	retryNo                 // NoRetry()
	retryLinear             // LinearBackoff(a)
	retryExponential        // ExponentialBackoff(a, b)
	retryLimitLinear        // LimitRetry(LinearBackoff(a), n)
	retryLimitExp           // LimitRetry(ExponentialBackoff(a, b), n)
	retryLimitNo            // LimitRetry(NoRetry(), n)
	fuzzRetryKinds
)

// fuzzSeed is one input of FuzzObtainInputs, named for the seed corpus.
type fuzzSeed struct {
	key, prefix       string
	flags             uint8
	ttl, renew, drift time.Duration
	retry             uint8
	retryA, retryB    time.Duration
	retryN            int
	refresh           time.Duration // the TTL given to Refresh
}

// FuzzObtainInputs checks that Obtain and Refresh reject exactly the
// invalid inputs, with ErrInvalidArgument and before sending anything, and
// that a valid Obtain stores the lock at prefix+key.
func FuzzObtainInputs(f *testing.F) {
	const (
		ms  = time.Millisecond
		sec = time.Second
	)
	seeds := []fuzzSeed{
		{key: "a", flags: fuzzTTL, ttl: ms, refresh: ms},
		{key: "", refresh: ms},
		{key: "order:42", prefix: "locks:", flags: fuzzTTL | fuzzRenew | fuzzDrift, ttl: 10 * sec, renew: 3 * sec,
			drift: 5 * ms, retry: retryLimitLinear, retryA: 10 * ms, retryN: 3, refresh: 20 * sec},

		// TTLs around 1ms, and truncation to whole milliseconds.
		{key: "k", flags: fuzzTTL, ttl: ms - 1},
		{key: "k", flags: fuzzTTL, ttl: 0},
		{key: "k", flags: fuzzTTL, ttl: -1},
		{key: "k", flags: fuzzTTL, ttl: math.MinInt64},
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: ms + ms/2, renew: ms, refresh: ms},
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: 2*ms + ms/2, renew: ms, refresh: ms},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: ms + ms/2, drift: ms, refresh: ms},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: 2 * ms, drift: ms - 1, refresh: ms},
		// A huge TTL: valid, and miniredis does not mind.
		{key: "k", prefix: "p", flags: fuzzTTL | fuzzRenew, ttl: math.MaxInt64, renew: math.MaxInt64 - 1e6, refresh: math.MaxInt64},

		// Renew interval: zero and negative when given, the whole TTL, just under it.
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: sec, renew: 0},
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: sec, renew: -1},
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: sec, renew: sec},
		{key: "k", flags: fuzzTTL | fuzzRenew, ttl: sec, renew: sec - 1, refresh: sec},

		// Drift: zero is valid, negative and the whole TTL are not; a
		// Refresh to a TTL not above the drift is invalid too.
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: sec, drift: 0, refresh: sec},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: sec, drift: -1},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: sec, drift: sec},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: sec, drift: 10 * ms, refresh: 10 * ms},
		{key: "k", flags: fuzzTTL | fuzzDrift, ttl: sec, drift: 10 * ms, refresh: 11 * ms},

		// Refresh TTLs.
		{key: "k", refresh: 0},
		{key: "k", refresh: ms - 1},
		{key: "k", refresh: -1},
		{key: "k", refresh: ms + 1},

		// Retry strategies at and around their limits.
		{key: "k", retry: retryNo, refresh: sec},
		{key: "k", retry: retryLinear, retryA: ms, refresh: sec},
		{key: "k", retry: retryLinear, retryA: ms - 1},
		{key: "k", retry: retryExponential, retryA: ms, retryB: ms, refresh: sec},
		{key: "k", retry: retryExponential, retryA: ms - 1, retryB: ms},
		{key: "k", retry: retryExponential, retryA: 2 * ms, retryB: ms},
		{key: "k", retry: retryExponential, retryA: ms, retryB: math.MaxInt64, refresh: sec},
		{key: "k", retry: retryLimitLinear, retryA: ms, retryN: -1},
		{key: "k", retry: retryLimitLinear, retryA: ms, retryN: 0, refresh: sec},
		{key: "k", retry: retryLimitLinear, retryA: 0, retryN: 5},
		{key: "k", retry: retryLimitExp, retryA: ms, retryB: 10 * ms, retryN: math.MaxInt, refresh: sec},
		{key: "k", retry: retryLimitExp, retryA: ms, retryB: 0, retryN: 1},
		{key: "k", retry: retryLimitNo, retryN: math.MinInt},
		{key: "k", flags: fuzzRetryAtNew, retry: retryLimitNo, retryN: 2, refresh: sec},

		// Options given to New are checked on their own against the
		// defaults: a 15s renew interval is too long for the default 10s
		// TTL even when the call asks for a 20s TTL.
		{key: "k", flags: fuzzTTL | fuzzRenew | fuzzRenewAtNew, ttl: 20 * sec, renew: 15 * sec},
		{key: "k", flags: fuzzTTL | fuzzTTLAtNew | fuzzRenew, ttl: 20 * sec, renew: 15 * sec, refresh: sec},
		{key: "k", flags: fuzzTTL | fuzzTTLAtNew | fuzzDrift, ttl: ms, drift: ms},

		// Keys and prefixes Redis must store verbatim.
		{key: "\x00", prefix: "\xff\xfe", flags: fuzzPrefixAtNew, refresh: sec},
		{key: "ключ 🔒", prefix: "{tag}:", refresh: sec},
		{key: "a b\r\n*1\r\n$4\r\nPING", refresh: sec},
	}
	for _, s := range seeds {
		f.Add(s.key, s.prefix, s.flags, int64(s.ttl), int64(s.renew), int64(s.drift),
			s.retry, int64(s.retryA), int64(s.retryB), s.retryN, int64(s.refresh))
	}

	m, err := miniredis.Run()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	var sent sentCounter
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	client.AddHook(&sent)
	f.Cleanup(func() { _ = client.Close() })
	raw := redis.NewClient(&redis.Options{Addr: m.Addr()}) // for checks, not counted
	f.Cleanup(func() { _ = raw.Close() })

	f.Fuzz(func(t *testing.T, key, prefix string, flags uint8, ttlNs, renewNs, driftNs int64,
		retryKind uint8, retryA, retryB int64, retryN int, refreshNs int64) {
		m.FlushAll()
		ctx := t.Context()
		ttl, renew, drift := time.Duration(ttlNs), time.Duration(renewNs), time.Duration(driftNs)
		refreshTTL := time.Duration(refreshNs)
		retryKind %= fuzzRetryKinds

		// The options, each to New or to Obtain as the flags say.
		var newOpts, callOpts []locksmith.Option
		add := func(atNew bool, o locksmith.Option) {
			if atNew {
				newOpts = append(newOpts, o)
			} else {
				callOpts = append(callOpts, o)
			}
		}
		add(flags&fuzzPrefixAtNew != 0, locksmith.WithPrefix(prefix))
		if flags&fuzzTTL != 0 {
			add(flags&fuzzTTLAtNew != 0, locksmith.WithTTL(ttl))
		}
		if flags&fuzzRenew != 0 {
			add(flags&fuzzRenewAtNew != 0, locksmith.WithRenewInterval(renew))
		}
		if flags&fuzzDrift != 0 {
			add(flags&fuzzDriftAtNew != 0, locksmith.WithDrift(drift))
		}
		if s := fuzzStrategy(retryKind, retryA, retryB, retryN); s != nil {
			add(flags&fuzzRetryAtNew != 0, locksmith.WithRetry(s))
		}

		invalid, effTTL, effDrift := expectObtain(key, prefix, flags, ttl, renew, drift, retryKind, retryA, retryB, retryN)

		if invalid == "" {
			checkBackoff(t, retryKind, time.Duration(retryA), time.Duration(retryB), retryN)
		}

		locker := newLocker(t, client, newOpts...)
		before := sent.n.Load()
		start := time.Now()
		lk, err := locker.Obtain(ctx, key, callOpts...)
		elapsed := time.Since(start)
		n := sent.n.Load() - before
		rkey := prefix + key

		if invalid != "" {
			if !errors.Is(err, locksmith.ErrInvalidArgument) {
				t.Fatalf("Obtain with %s: got err %v, want one matching ErrInvalidArgument", invalid, err)
			}
			if lk != nil {
				t.Fatalf("Obtain with %s returned a lock with its error", invalid)
			}
			if n != 0 {
				t.Fatalf("Obtain with %s sent %d commands or dials, want 0", invalid, n)
			}
			return
		}
		switch {
		case errors.Is(err, locksmith.ErrInvalidArgument):
			t.Fatalf("Obtain(key %q, TTL %v, flags %08b, renew %v, drift %v, retry %d(%v, %v, %d)) = %v, want success",
				key, ttl, flags, renew, drift, retryKind, retryA, retryB, retryN, err)
		case errors.Is(err, locksmith.ErrLockLost):
			// The reply took longer than the lock's validity, which the
			// fuzzer can make tiny: Obtain must have deleted the lock.
			if validity := effTTL - effDrift; elapsed < validity {
				t.Fatalf("Obtain took %v, within the validity %v, yet returned %v", elapsed, validity, err)
			}
			if n, err := raw.Exists(ctx, rkey).Result(); err != nil || n != 0 {
				t.Fatalf("after Obtain returned ErrLockLost: EXISTS %q = %d, %v; want 0", rkey, n, err)
			}
			return
		case err != nil:
			t.Fatalf("Obtain(key %q, prefix %q) on a fresh key: %v", key, prefix, err)
		}
		if n == 0 {
			t.Fatal("Obtain succeeded without sending anything")
		}

		if got := lk.Key(); got != key {
			t.Errorf("Key() = %q, want %q", got, key)
		}
		checkStored(t, raw, m, rkey, lk.Token(), effTTL)

		// Refresh's TTL: at least 1ms, and longer than the drift allowance
		// (the default one always is) and the renew interval, when given.
		effRefresh := refreshTTL.Truncate(time.Millisecond)
		refreshInvalid := refreshTTL < time.Millisecond ||
			(flags&fuzzDrift != 0 && drift >= effRefresh) ||
			(flags&fuzzRenew != 0 && renew >= effRefresh)
		before = sent.n.Load()
		err = lk.Refresh(ctx, refreshTTL)
		n = sent.n.Load() - before
		switch {
		case refreshInvalid:
			if !errors.Is(err, locksmith.ErrInvalidArgument) {
				t.Fatalf("Refresh(%v) with drift %v: got err %v, want one matching ErrInvalidArgument", refreshTTL, drift, err)
			}
			if n != 0 {
				t.Fatalf("invalid Refresh(%v) sent %d commands or dials, want 0", refreshTTL, n)
			}
			checkStored(t, raw, m, rkey, lk.Token(), effTTL)
		case err != nil:
			t.Fatalf("Refresh(%v): %v", refreshTTL, err)
		default:
			checkStored(t, raw, m, rkey, lk.Token(), effRefresh)
		}

		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if n, err := raw.Exists(ctx, rkey).Result(); err != nil || n != 0 {
			t.Fatalf("after Release: EXISTS %q = %d, %v; want 0", rkey, n, err)
		}
	})
}

// fuzzStrategy builds the retry strategy the selector names, or nil for
// none.
func fuzzStrategy(kind uint8, a, b int64, n int) locksmith.RetryStrategy {
	switch kind {
	case retryNo:
		return locksmith.NoRetry()
	case retryLinear:
		return locksmith.LinearBackoff(time.Duration(a))
	case retryExponential:
		return locksmith.ExponentialBackoff(time.Duration(a), time.Duration(b))
	case retryLimitLinear:
		return locksmith.LimitRetry(locksmith.LinearBackoff(time.Duration(a)), n)
	case retryLimitExp:
		return locksmith.LimitRetry(locksmith.ExponentialBackoff(time.Duration(a), time.Duration(b)), n)
	case retryLimitNo:
		return locksmith.LimitRetry(locksmith.NoRetry(), n)
	}
	return nil
}

// wholeTagOrNoBrace reports whether prefix has no '{', or a '{' followed,
// not at once, by a '}': a whole Redis Cluster hash tag.
func wholeTagOrNoBrace(prefix string) bool {
	open := strings.Index(prefix, "{")
	if open < 0 {
		return true
	}
	end := strings.Index(prefix[open+1:], "}")
	return end > 0
}

// checkBackoff draws delays from a valid strategy, as a waiter that keeps
// losing would, and checks them against what the strategy promises.
func checkBackoff(t *testing.T, kind uint8, a, b time.Duration, n int) {
	t.Helper()
	const draws = 100
	s := fuzzStrategy(kind, int64(a), int64(b), n)
	if s == nil {
		return
	}
	limited := kind == retryLimitLinear || kind == retryLimitExp || kind == retryLimitNo
	bo := s.NewBackoff()
	for i := range draws {
		d, ok := bo.Next()
		wantOK := kind != retryNo && kind != retryLimitNo && (!limited || i < n)
		if ok != wantOK {
			t.Fatalf("strategy %d(%v, %v, %d): draw %d: ok = %v, want %v", kind, a, b, n, i, ok, wantOK)
		}
		if !ok {
			return
		}
		switch kind {
		case retryLinear, retryLimitLinear:
			if d != a {
				t.Fatalf("LinearBackoff(%v): draw %d: delay %v", a, i, d)
			}
		case retryExponential, retryLimitExp:
			if d < a || d > b {
				t.Fatalf("ExponentialBackoff(%v, %v): draw %d: delay %v, want within [min, max]", a, b, i, d)
			}
		}
	}
}

// expectObtain decides, independently of the library, whether Obtain must
// reject its inputs: it returns why ("" when valid), and for valid inputs
// the effective TTL and drift allowance.
//
// Each option is checked when it is applied. Then the options given to New
// are checked as a whole against the defaults, and the options of the call
// as a whole on top of New's: the renew interval and the drift must be
// shorter than the TTL, which counts in whole milliseconds.
func expectObtain(key, prefix string, flags uint8, ttl, renew, drift time.Duration,
	retryKind uint8, a, b int64, n int) (invalid string, effTTL, effDrift time.Duration) {
	ms := time.Millisecond
	switch {
	case key == "":
		return "an empty key", 0, 0
	case strings.HasPrefix(key, "~"):
		return "a key starting with ~, which is reserved", 0, 0
	case !wholeTagOrNoBrace(prefix):
		return "a prefix whose '{' opens no hash tag", 0, 0
	case flags&fuzzTTL != 0 && ttl < ms:
		return "a TTL under 1ms", 0, 0
	case flags&fuzzRenew != 0 && renew <= 0:
		return "a renew interval that is not positive", 0, 0
	case flags&fuzzDrift != 0 && drift < 0:
		return "a negative drift", 0, 0
	}
	linear := retryKind == retryLinear || retryKind == retryLimitLinear
	exponential := retryKind == retryExponential || retryKind == retryLimitExp
	limit := retryKind == retryLimitLinear || retryKind == retryLimitExp || retryKind == retryLimitNo
	switch {
	case linear && time.Duration(a) < ms:
		return "a LinearBackoff under 1ms", 0, 0
	case exponential && time.Duration(a) < ms:
		return "an ExponentialBackoff minimum under 1ms", 0, 0
	case exponential && b < a:
		return "an ExponentialBackoff maximum below its minimum", 0, 0
	case limit && n < 0:
		return "a negative LimitRetry count", 0, 0
	}

	// Check one stage: the options it sets on top of the TTL it inherits.
	check := func(stage string, atNew bool, ttlIn time.Duration) (string, time.Duration) {
		eff := ttlIn
		if flags&fuzzTTL != 0 && (flags&fuzzTTLAtNew != 0) == atNew {
			eff = ttl.Truncate(ms)
		}
		// Options given to New stay in force for the call.
		renewSeen := flags&fuzzRenew != 0 && (!atNew || flags&fuzzRenewAtNew != 0)
		driftSeen := flags&fuzzDrift != 0 && (!atNew || flags&fuzzDriftAtNew != 0)
		switch {
		case renewSeen && renew >= eff:
			return "a renew interval not shorter than the TTL at " + stage, eff
		case driftSeen && drift >= eff:
			return "a drift not shorter than the TTL at " + stage, eff
		}
		return "", eff
	}
	why, newTTL := check("New", true, locksmith.DefaultTTL)
	if why != "" {
		return why, 0, 0
	}
	if why, effTTL = check("Obtain", false, newTTL); why != "" {
		return why, 0, 0
	}
	effDrift = min(effTTL/100+2*ms, effTTL/2)
	if flags&fuzzDrift != 0 {
		effDrift = drift
	}
	return "", effTTL, effDrift
}

// checkStored checks that the lock lives at exactly rkey, holding token,
// with a TTL that is positive and at most ttl.
func checkStored(t *testing.T, raw *redis.Client, m *miniredis.Miniredis, rkey, token string, ttl time.Duration) {
	t.Helper()
	ctx := t.Context()
	got, err := raw.Get(ctx, rkey).Result()
	if err != nil || got != token {
		t.Fatalf("GET %q = %q, %v; want the token %q", rkey, got, err, token)
	}
	if keys := m.Keys(); len(keys) != 1 {
		t.Fatalf("keys in Redis: %q, want only %q", keys, rkey)
	}
	pttl, err := raw.PTTL(ctx, rkey).Result()
	if err != nil || pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL %q = %v, %v; want in (0, %v]", rkey, pttl, err, ttl)
	}
}
