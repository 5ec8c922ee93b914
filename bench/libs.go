package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/locksmith-go/locksmith"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// A lib is one lock library at one setting. Every lib waits for a held lock
// the way its documentation says to, bounded by the ctx given to obtain,
// whose deadline is the end of the measured window.
type lib interface {
	// name is the short label used in the tables.
	name() string
	// settings says how the library is configured, for the legend.
	settings() string
	// runsOn is the deployment it is measured on.
	runsOn() topology
	// newLocker returns an independent instance on d, with its own
	// clients and connections, as a separate process would have.
	newLocker(d *deployment) (locker, error)
}

// A locker is one instance of a lib, safe for concurrent use.
type locker interface {
	// obtain acquires the lock on key, waiting for it as the library
	// does. It returns an error matching errNotObtained when the library
	// gave up (its retry budget ran out or ctx ended).
	obtain(ctx context.Context, key string) (held, error)
	close()
}

// held is an obtained lock. It is an interface rather than a release func
// so that the adapters add no allocation of their own: each wraps the
// library's own handle (a pointer), which converts to an interface for
// free, where a method value or closure would cost one allocation.
type held interface {
	release(ctx context.Context) error
}

var errNotObtained = errors.New("not obtained")

// A baseline is the raw go-redis recipe that heads a list of libraries:
// the figures in parentheses are ratios to its.
type baseline interface {
	lib
	baseline()
}

// isBaseline reports whether l is a baseline.
func isBaseline(l lib) bool {
	_, ok := l.(baseline)
	return ok
}

// lockTTL is the TTL for the libraries that take one per call and have no
// default (bsm/redislock and the raw baseline); it is locksmith's default.
// redsync (8s) and rueidislock (5s) keep their own defaults.
const lockTTL = 10 * time.Second

// libraries returns the libraries in table order: the baseline first.
func libraries(rawRetry time.Duration) []lib {
	return []lib{
		rawLib{retry: rawRetry},
		locksmithLib{},
		locksmithPerCallLib{},
		locksmithTryOnceLib{},
		smithCommandsLib{},
		locksmithWithLockLib{},
		locksmithAutoLib{},
		smithQuorumLib{},
		smithClusterLib{},
		redislockLib{interval: 5 * time.Millisecond, why: "a tight setting"},
		redislockLib{interval: 100 * time.Millisecond, why: "the interval of its README/example retry"},
		redsyncLib{},
		redsyncQuorumLib{},
		rueidisLib{},
		rueidisLib{readme: true},
	}
}

// newGoRedis returns a go-redis client at its default settings.
func newGoRedis(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// mainSmith returns mode, a locksmith row's settings, with a new client of
// d's main server and a Locker on it made with opts.
func mainSmith(d *deployment, mode smithLocker, opts ...locksmith.Option) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	mode.clients, mode.locker = []redis.UniversalClient{c}, locksmith.New(c, opts...)
	return &mode, nil
}

// --- raw go-redis: the physical limit ---------------------------------------

// rawLib is the recipe every Redis lock starts from, with nothing added:
// SET key token NX with a TTL, retried every retry (0: at once, a spin)
// until it succeeds or ctx ends, and a compare-and-delete script run with
// EVALSHA to release. Retrying every millisecond is the "tight retry" that
// stands for the physical limit of polling: faster polling only burns the
// server and the client's CPU, which on two cores slows the holder.
type rawLib struct{ retry time.Duration }

var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

func (r rawLib) name() string { return "raw go-redis" }

func (r rawLib) runsOn() topology { return mainServer }

func (rawLib) baseline() {}

func (r rawLib) settings() string {
	return fmt.Sprintf("go-redis v9 SET NX (TTL %v) + EVALSHA compare-and-delete; SET NX %s; the baseline", lockTTL, retryText(r.retry))
}

// retryText says how a raw polling loop with delay retry retries.
func retryText(retry time.Duration) string {
	if retry <= 0 {
		return "retried at once (spin)"
	}
	return fmt.Sprintf("retried every %v", retry)
}

func (r rawLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &rawLocker{client: c, retry: r.retry}, nil
}

type rawLocker struct {
	client *redis.Client
	retry  time.Duration
}

type rawHeld struct {
	client *redis.Client
	key    string
	token  string
}

func (l *rawLocker) obtain(ctx context.Context, key string) (held, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	token := hex.EncodeToString(b[:])
	for {
		ok, err := l.client.SetNX(ctx, key, token, lockTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return &rawHeld{client: l.client, key: key, token: token}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errNotObtained, ctx.Err())
		}
		if l.retry > 0 {
			time.Sleep(l.retry)
		}
	}
}

func (h *rawHeld) release(ctx context.Context) error {
	n, err := rawRelease.Run(ctx, h.client, []string{h.key}, h.token).Int64()
	if err == nil && n != 1 {
		err = errors.New("lock was not held at release")
	}
	return err
}

func (l *rawLocker) close() { _ = l.client.Close() }

// --- locksmith (the working tree) ----------------------------------------------

// smithRetry is the retry setting of every locksmith row.
func smithRetry() locksmith.Option {
	return locksmith.WithRetry(locksmith.LinearBackoff(50 * time.Millisecond))
}

type locksmithLib struct{}

func (locksmithLib) name() string { return "locksmith" }

func (locksmithLib) runsOn() topology { return mainServer }

func (locksmithLib) settings() string {
	return "working tree; New(client, WithRetry(LinearBackoff(50ms))), default TTL 10s, waits bounded by the ctx deadline"
}

func (locksmithLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{}, smithRetry())
}

// locksmithPerCallLib is locksmith as the README's examples call it: a
// Locker made with no options, and the TTL and retry strategy given to
// each call.
type locksmithPerCallLib struct{}

func (locksmithPerCallLib) name() string { return "locksmith per call" }

func (locksmithPerCallLib) runsOn() topology { return mainServer }

func (locksmithPerCallLib) settings() string {
	return "working tree; New(client), each call Obtain(ctx, key, WithTTL(10s), WithRetry(LinearBackoff(50ms))), as the README's examples pass options"
}

func (locksmithPerCallLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{perCall: true})
}

// locksmithTryOnceLib is locksmith's default, try once, as the README's
// first example calls it: a Locker made with no options, and each call
// given only its TTL, so that Obtain sends one command and never waits.
// It runs only in the uncontended scenarios: in the others it would give
// up at once.
type locksmithTryOnceLib struct{}

func (locksmithTryOnceLib) name() string { return "locksmith try once" }

func (locksmithTryOnceLib) runsOn() topology { return mainServer }

func (locksmithTryOnceLib) uncontendedOnly() {}

func (locksmithTryOnceLib) settings() string {
	return "working tree; New(client), each call Obtain(ctx, key, WithTTL(10s)) with the default NoRetry: one attempt, SET NX PX (and a GET of the holder when taken); uncontended scenarios only"
}

func (locksmithTryOnceLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{tryOnce: true})
}

// locksmithWithLockLib is locksmith as the README's WithLock example calls
// it: a Locker made with no options, each cycle one WithLock call with its
// TTL, whose fn returns at once; the whole call is the cycle (the
// harness's release does nothing). Like try once, WithLock without a
// retry strategy tries once, so it runs only in the uncontended
// scenarios.
type locksmithWithLockLib struct{}

func (locksmithWithLockLib) name() string { return "locksmith WithLock" }

func (locksmithWithLockLib) runsOn() topology { return mainServer }

func (locksmithWithLockLib) uncontendedOnly() {}

func (locksmithWithLockLib) settings() string {
	return "working tree; New(client), each cycle WithLock(ctx, key, fn, WithTTL(10s)) with an fn that returns nil at once (the default NoRetry: one attempt); obtain, the lease it starts and stops, and release, all in the cycle; uncontended scenarios only"
}

func (locksmithWithLockLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{withLock: true})
}

// uncontendedOnly reports whether l runs only in the uncontended scenarios.
func uncontendedOnly(l lib) bool {
	_, ok := l.(interface{ uncontendedOnly() })
	return ok
}

// locksmithAutoLib is locksmith over go-redis's experimental
// auto-pipelining client (Client.AutoPipeline, blocking face, default
// options), with options per call: concurrent calls' commands, scripts
// included, share pipelines, as rueidis does by default.
type locksmithAutoLib struct{}

func (locksmithAutoLib) name() string { return "locksmith autopipeline" }

func (locksmithAutoLib) runsOn() topology { return mainServer }

func (locksmithAutoLib) settings() string {
	return "working tree; New(client.AutoPipeline()) (go-redis v9 experimental auto-pipelining, default options), options per call as in the locksmith per call row"
}

func (locksmithAutoLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	ap, err := c.AutoPipeline()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &smithLocker{clients: []redis.UniversalClient{c}, locker: locksmith.New(ap), perCall: true}, nil
}

// smithQuorumLib is locksmith on a quorum of independent servers (Redlock):
// NewQuorum over one client per server, each with ContextTimeoutEnabled as
// NewQuorum's documentation asks.
type smithQuorumLib struct{}

func (smithQuorumLib) name() string { return fmt.Sprintf("locksmith quorum (%d)", deploySize) }

func (smithQuorumLib) runsOn() topology { return quorumServers }

func (smithQuorumLib) settings() string {
	return fmt.Sprintf("working tree; NewQuorum(clients, WithRetry(LinearBackoff(50ms))) over %d independent servers, a client each with ContextTimeoutEnabled; default TTL 10s, restart guard on (waited out before the runs); requests and commands summed over the %d servers",
		deploySize, deploySize)
}

func (smithQuorumLib) newLocker(d *deployment) (locker, error) {
	var clients []redis.UniversalClient
	for _, u := range d.urls {
		opt, err := redis.ParseURL(u)
		if err != nil {
			for _, c := range clients {
				_ = c.Close()
			}
			return nil, err
		}
		opt.ContextTimeoutEnabled = true
		clients = append(clients, redis.NewClient(opt))
	}
	l := locksmith.NewQuorum(clients, smithRetry())
	// The restart guard keeps servers just started out for the TTL: wait
	// it out here, so that the runs measure the steady state.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := l.Obtain(ctx, "bench:restart-guard", smithRetry())
	if err != nil {
		return nil, fmt.Errorf("waiting out the restart guard: %w", err)
	}
	if err := lk.Release(ctx); err != nil {
		return nil, err
	}
	return &smithLocker{clients: clients, locker: l}, nil
}

// smithClusterLib is locksmith on a Redis Cluster, through a go-redis
// cluster client at its defaults.
type smithClusterLib struct{}

func (smithClusterLib) name() string { return fmt.Sprintf("locksmith cluster (%d)", deploySize) }

func (smithClusterLib) runsOn() topology { return clusterServers }

func (smithClusterLib) settings() string {
	return fmt.Sprintf("working tree; New(clusterClient, WithRetry(LinearBackoff(50ms))), a go-redis ClusterClient at its defaults over %d masters without replicas; default TTL 10s; requests and commands summed over the %d masters",
		deploySize, deploySize)
}

func (smithClusterLib) newLocker(d *deployment) (locker, error) {
	var addrs []string
	for _, u := range d.urls {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, opt.Addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	return &smithLocker{clients: []redis.UniversalClient{c}, locker: locksmith.New(c, smithRetry())}, nil
}

// smithLocker is an instance of any of the locksmith rows.
type smithLocker struct {
	clients []redis.UniversalClient
	locker  *locksmith.Locker
	perCall bool // pass the options to each call, as the README does
	tryOnce bool // pass only the TTL to each call: try once
	// withLock makes obtain a whole WithLock call, with the TTL, whose fn
	// returns at once; its held's release does nothing.
	withLock bool
	// permits > 0 makes obtain take one of that many permits of the
	// semaphore named by the key, with the options per call.
	permits int
	// rw makes obtain take the write hold of the read-write lock named by
	// the key, and obtainRead a read hold, with the options per call.
	// Without it obtainRead is obtain: the plain lock, exclusive.
	rw bool
}

type smithHeld struct{ lk *locksmith.Lock }

func (l *smithLocker) obtain(ctx context.Context, key string) (held, error) {
	var (
		lk  *locksmith.Lock
		err error
	)
	switch {
	case l.permits > 0:
		lk, err = l.locker.Semaphore(key, l.permits).Acquire(ctx, locksmith.WithTTL(10*time.Second), smithRetry())
	case l.rw:
		lk, err = l.locker.RWMutex(key).ObtainWrite(ctx, locksmith.WithTTL(10*time.Second), smithRetry())
	case l.withLock:
		err := l.locker.WithLock(ctx, key, func(context.Context) error { return nil }, locksmith.WithTTL(10*time.Second))
		if errors.Is(err, locksmith.ErrNotObtained) {
			return nil, fmt.Errorf("%w: %w", errNotObtained, err)
		}
		if err != nil {
			return nil, err
		}
		return releasedHeld{}, nil
	case l.tryOnce:
		lk, err = l.locker.Obtain(ctx, key, locksmith.WithTTL(10*time.Second))
	case l.perCall:
		lk, err = l.locker.Obtain(ctx, key, locksmith.WithTTL(10*time.Second), smithRetry())
	default:
		lk, err = l.locker.Obtain(ctx, key)
	}
	return smithResult(lk, err)
}

// obtainRead takes a read hold of the read-write lock named by key, or
// with rw unset the plain lock, as obtain does.
func (l *smithLocker) obtainRead(ctx context.Context, key string) (held, error) {
	if !l.rw {
		return l.obtain(ctx, key)
	}
	return smithResult(l.locker.RWMutex(key).ObtainRead(ctx, locksmith.WithTTL(10*time.Second), smithRetry()))
}

// smithResult adapts what a locksmith call returned.
func smithResult(lk *locksmith.Lock, err error) (held, error) {
	if errors.Is(err, locksmith.ErrNotObtained) {
		return nil, fmt.Errorf("%w: %w", errNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return smithHeld{lk}, nil
}

func (h smithHeld) release(ctx context.Context) error { return h.lk.Release(ctx) }

// releasedHeld is a hold its call released already (a WithLock row's).
type releasedHeld struct{}

func (releasedHeld) release(context.Context) error { return nil }

// close closes the Locker, then its clients.
func (l *smithLocker) close() {
	_ = l.locker.Close()
	for _, c := range l.clients {
		_ = c.Close()
	}
}

// --- github.com/bsm/redislock ------------------------------------------------

// redislockLib waits with LinearBackoff(interval), its only waiting
// strategy that keeps trying until ctx ends (LimitRetry shares its counter
// between calls, so it cannot be one value for all goroutines).
type redislockLib struct {
	interval time.Duration
	why      string
}

func (r redislockLib) name() string { return fmt.Sprintf("redislock %v", r.interval) }

func (r redislockLib) runsOn() topology { return mainServer }

func (r redislockLib) settings() string {
	return fmt.Sprintf("bsm/redislock, TTL %v, RetryStrategy LinearBackoff(%v) (%s)", lockTTL, r.interval, r.why)
}

func (r redislockLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &redislockLocker{
		client: c,
		locker: redislock.New(c),
		opts:   &redislock.Options{RetryStrategy: redislock.LinearBackoff(r.interval)},
	}, nil
}

type redislockLocker struct {
	client *redis.Client
	locker *redislock.Client
	opts   *redislock.Options // stateless strategy: shared by all calls
	// retries > 0 gives each call Options of its own, whose strategy is
	// opts' limited by LimitRetry to that many retries, as redislock's
	// example makes one per call (a LimitRetry counts the retries of
	// every call that shares it).
	retries int
}

type redislockHeld struct{ lk *redislock.Lock }

func (l *redislockLocker) obtain(ctx context.Context, key string) (held, error) {
	opts := l.opts
	if l.retries > 0 {
		opts = &redislock.Options{RetryStrategy: redislock.LimitRetry(l.opts.RetryStrategy, l.retries)}
	}
	lk, err := l.locker.Obtain(ctx, key, lockTTL, opts)
	if errors.Is(err, redislock.ErrNotObtained) || (err != nil && ctx.Err() != nil) {
		return nil, fmt.Errorf("%w: %w", errNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return redislockHeld{lk}, nil
}

func (h redislockHeld) release(ctx context.Context) error { return h.lk.Release(ctx) }

func (l *redislockLocker) close() { _ = l.client.Close() }

// --- github.com/go-redsync/redsync/v4 --------------------------------------------

// redsyncLib is redsync at its defaults, over one go-redis pool: expiry 8s,
// 32 tries with a random 50-250ms delay between them, so a LockContext
// gives up after about 5s of waiting. A Mutex holds the state of one
// acquisition, so each obtain makes its own.
type redsyncLib struct{}

func (redsyncLib) name() string { return "redsync" }

func (redsyncLib) runsOn() topology { return mainServer }

func (redsyncLib) settings() string {
	return "go-redsync/redsync/v4 defaults over one goredis/v9 pool: expiry 8s, 32 tries, retry delay rand(50ms, 250ms); NewMutex per acquisition"
}

func (redsyncLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &redsyncLocker{clients: []*redis.Client{c}, rs: redsync.New(redsyncgoredis.NewPool(c))}, nil
}

type redsyncLocker struct {
	clients []*redis.Client
	rs      *redsync.Redsync
}

type redsyncHeld struct{ m *redsync.Mutex }

func (l *redsyncLocker) obtain(ctx context.Context, key string) (held, error) {
	m := l.rs.NewMutex(key)
	err := m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || (err != nil && ctx.Err() != nil) {
		return nil, fmt.Errorf("%w: %w", errNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (h redsyncHeld) release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("lock was not held at release")
	}
	return err
}

func (l *redsyncLocker) close() {
	for _, c := range l.clients {
		_ = c.Close()
	}
}

// redsyncQuorumLib is redsync on the quorum's independent servers, one
// go-redis pool each, as its README sets up Redlock: the same defaults as
// redsyncLib, a majority of the pools per acquisition.
type redsyncQuorumLib struct{}

func (redsyncQuorumLib) name() string { return fmt.Sprintf("redsync quorum (%d)", deploySize) }

func (redsyncQuorumLib) runsOn() topology { return quorumServers }

func (redsyncQuorumLib) settings() string {
	return fmt.Sprintf("go-redsync/redsync/v4 defaults over %d goredis/v9 pools, one per independent server (its README's Redlock set-up): expiry 8s, 32 tries, retry delay rand(50ms, 250ms); NewMutex per acquisition; requests and commands summed over the %d servers",
		deploySize, deploySize)
}

func (redsyncQuorumLib) newLocker(d *deployment) (locker, error) {
	var clients []*redis.Client
	var pools []redsyncredis.Pool
	for _, u := range d.urls {
		c, err := newGoRedis(u)
		if err != nil {
			for _, c := range clients {
				_ = c.Close()
			}
			return nil, err
		}
		clients = append(clients, c)
		pools = append(pools, redsyncgoredis.NewPool(c))
	}
	return &redsyncLocker{clients: clients, rs: redsync.New(pools...)}, nil
}

// --- github.com/redis/rueidis/rueidislock ------------------------------------------

// rueidisLib is rueidislock, which needs its own rueidis client. It waits
// for client-side-caching invalidations of the lock keys (CLIENT TRACKING)
// rather than polling. At its defaults a lock is a majority of 3 keys
// (KeyMajority 2); its README recommends KeyMajority 1 for a single Redis
// and NoLoopTracking for Redis >= 7.0.5.
type rueidisLib struct{ readme bool }

func (r rueidisLib) name() string {
	if r.readme {
		return "rueidislock README"
	}
	return "rueidislock"
}

func (r rueidisLib) runsOn() topology { return mainServer }

func (r rueidisLib) settings() string {
	if r.readme {
		return "rueidis/rueidislock as its README recommends for one Redis: KeyMajority 1 (1 key), NoLoopTracking; validity 5s; woken by client-side-caching invalidations"
	}
	return "rueidis/rueidislock defaults: KeyMajority 2 (3 keys), validity 5s, TryNextAfter 20ms; woken by client-side-caching invalidations"
}

func (r rueidisLib) newLocker(d *deployment) (locker, error) {
	opt, err := rueidis.ParseURL(d.url())
	if err != nil {
		return nil, err
	}
	lo := rueidislock.LockerOption{ClientOption: opt}
	if r.readme {
		lo.KeyMajority = 1
		lo.NoLoopTracking = true
	}
	l, err := rueidislock.NewLocker(lo)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{locker: l}, nil
}

type rueidisLocker struct{ locker rueidislock.Locker }

// rueidisHeld is the cancel func WithContext returns: calling it releases
// the lock and waits until its keys are deleted.
type rueidisHeld context.CancelFunc

func (l *rueidisLocker) obtain(ctx context.Context, key string) (held, error) {
	_, cancel, err := l.locker.WithContext(ctx, key)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", errNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return rueidisHeld(cancel), nil
}

func (h rueidisHeld) release(context.Context) error {
	h()
	return nil
}

func (l *rueidisLocker) close() { l.locker.Close() }
