package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The libraries of the semaphore scenarios. Only locksmith has counted
// semaphores among the measured libraries; redislock, redsync and
// rueidislock have none, so they do not run these scenarios. A semaphore
// lib is made for one number of permits, its scenario's, and its
// instances' obtain takes one permit of the semaphore named by the key.

// semaphoreLibraries returns the semaphore libraries in table order, the
// baseline first, each with n permits. All of them run on the main server.
func semaphoreLibraries(rawRetry time.Duration, n int) []lib {
	return []lib{
		rawSemLib{retry: rawRetry, permits: n},
		smithSemLib{permits: n},
	}
}

// --- raw go-redis: the physical limit of polling -----------------------------

// rawSemLib is the plain recipe for a counted semaphore on Redis, with
// nothing added: a sorted set of the holders' tokens, each scored by when
// its permit expires by the server's clock; one script that drops the
// expired permits and adds the caller's token if fewer than n remain,
// retried every retry (0: at once, a spin) until it succeeds or ctx ends;
// and ZREM of the token to give the permit back (one command removes only
// the caller's own permit, so it needs no script). It does not wake
// waiters: they poll. Like rawLib, it stands for what polling can reach.
type rawSemLib struct {
	retry   time.Duration
	permits int
}

// rawPermitAcquire takes a permit. KEYS[1]: the semaphore. ARGV[1]: the
// limit, ARGV[2]: the caller's token, ARGV[3]: the TTL in ms. Returns 1
// when taken, 0 when the limit is reached. TIME before a write is allowed
// since Redis 5 replicates a script's effects rather than the script.
var rawPermitAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
return 1
`)

func (rawSemLib) name() string { return "raw sorted-set semaphore (polling)" }

func (rawSemLib) runsOn() topology { return mainServer }

func (rawSemLib) baseline() {}

func (r rawSemLib) settings() string {
	wait := retryText(r.retry)
	return fmt.Sprintf("go-redis v9 EVALSHA of one script (ZREMRANGEBYSCORE of the expired by server TIME, ZCARD < n, ZADD token with its expiry, TTL %v), %s; ZREM to release; the baseline of the semaphore rows",
		lockTTL, wait)
}

func (r rawSemLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &rawSemLocker{client: c, retry: r.retry, permits: r.permits}, nil
}

type rawSemLocker struct {
	client  *redis.Client
	retry   time.Duration
	permits int
}

type rawPermit struct {
	client *redis.Client
	key    string
	token  string
}

func (l *rawSemLocker) obtain(ctx context.Context, key string) (held, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	token := hex.EncodeToString(b[:])
	keys := []string{key}
	for {
		n, err := rawPermitAcquire.Run(ctx, l.client, keys, l.permits, token, lockTTL.Milliseconds()).Int()
		if err != nil {
			return nil, err
		}
		if n == 1 {
			return &rawPermit{client: l.client, key: key, token: token}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errNotObtained, ctx.Err())
		}
		if l.retry > 0 {
			time.Sleep(l.retry)
		}
	}
}

func (p *rawPermit) release(ctx context.Context) error {
	n, err := p.client.ZRem(ctx, p.key, p.token).Result()
	if err == nil && n != 1 {
		err = errors.New("permit was not held at release")
	}
	return err
}

func (l *rawSemLocker) close() { _ = l.client.Close() }

// --- locksmith (the working tree) ----------------------------------------------

// smithSemLib is locksmith's Semaphore as its documentation shows it: a
// Locker made with no options, a Semaphore value made where it is used,
// and the TTL and retry strategy (the lock rows') given to each Acquire.
type smithSemLib struct{ permits int }

func (smithSemLib) name() string { return "locksmith semaphore" }

func (smithSemLib) runsOn() topology { return mainServer }

func (smithSemLib) settings() string {
	return "working tree; New(client), each call Semaphore(key, n).Acquire(ctx, WithTTL(10s), WithRetry(LinearBackoff(50ms))), handed permits by releases, waits bounded by the ctx deadline"
}

func (s smithSemLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{permits: s.permits})
}
