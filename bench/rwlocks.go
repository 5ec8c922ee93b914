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

// The libraries of the read-write lock scenarios, whose workers mostly
// read (see rwworkload.go). Only locksmith has a read-write lock among the
// measured libraries, so the rows are a raw polling baseline, locksmith's
// RWMutex, and locksmith's plain lock taken for every read and write
// alike, to show what readers gain by sharing.

// An rwLocker is a locker that also takes read holds: its obtain takes
// the write hold, and obtainRead a read hold of the same lock, waiting as
// obtain does.
type rwLocker interface {
	locker
	obtainRead(ctx context.Context, key string) (held, error)
}

// rwLibraries returns the read-write libraries in table order, the
// baseline first. All of them run on the main server.
func rwLibraries(rawRetry time.Duration) []lib {
	return []lib{
		rawRWLib{retry: rawRetry},
		smithRWLib{},
		smithExclusiveLib{},
	}
}

// rwKey is the lock of the read-write scenarios.
const rwKey = "bench:rw"

// --- raw go-redis: the physical limit of polling -----------------------------

// rawRWLib is a plain read-write lock on Redis with writer preference,
// written for this benchmark with nothing added: three keys that share a
// hash tag, the readers' tokens in a sorted set scored by when each hold
// expires by the server's clock, the writer's token in a string with a
// TTL (SET PX), and the waiting writers' tokens in a second sorted set,
// scored by when each intent lapses. One script per attempt decides; it
// is retried every retry (0: at once, a spin) until it succeeds or ctx
// ends. A reader releases with ZREM of its token, a writer with a
// compare-and-delete script (rawRelease). Nobody is woken: waiters poll.
// A writer that gives up withdraws its intent with ZREM.
type rawRWLib struct{ retry time.Duration }

// rawIntentLife is how long a waiting writer's intent stops new readers
// unless its next attempt renews it: long beside any polling interval, so
// that a writer starved of CPU keeps its place, and short enough that a
// crashed writer stops readers only briefly.
const rawIntentLife = 2 * time.Second

// rawRWAcquire makes one attempt. KEYS[1]: the readers (sorted set),
// KEYS[2]: the writer (string), KEYS[3]: the waiting writers' intents
// (sorted set). ARGV[1]: "r" or "w", ARGV[2]: the caller's token,
// ARGV[3]: the hold's TTL in ms, ARGV[4]: how long a writer's intent
// lives, in ms. Returns 1 when taken, 0 when not. A reader enters when no
// writer holds and none waits; a writer when nobody holds, and otherwise
// leaves (or renews) its intent. Expired readers and intents are dropped
// first; an expired writer's key has gone by itself.
var rawRWAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if ARGV[1] == 'r' then
  if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('ZCARD', KEYS[3]) > 0 then
    return 0
  end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  return 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('ZCARD', KEYS[1]) > 0 then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[2])
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`)

func (rawRWLib) name() string { return "raw sorted-set rwlock (polling)" }

func (rawRWLib) runsOn() topology { return mainServer }

func (rawRWLib) baseline() {}

func (r rawRWLib) settings() string {
	wait := retryText(r.retry)
	return fmt.Sprintf("go-redis v9 EVALSHA of one script per attempt over 3 keys (readers: a sorted set scored by expiry by server TIME; writer: SET PX; waiting writers' intents: a sorted set, each lapsing %v after its last attempt, which stop new readers), TTL %v, %s; a reader releases with ZREM, a writer with EVALSHA compare-and-delete; the baseline of the read-write rows",
		rawIntentLife, lockTTL, wait)
}

func (r rawRWLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &rawRWLocker{client: c, retry: r.retry, ttl: lockTTL, intentLife: rawIntentLife}, nil
}

type rawRWLocker struct {
	client          *redis.Client
	retry           time.Duration
	ttl, intentLife time.Duration
}

// rawRWKeys returns the keys of the read-write lock named key: readers,
// writer, intents, in one hash slot.
func rawRWKeys(key string) []string {
	tag := "{" + key + "}"
	return []string{tag + ":r", tag + ":w", tag + ":q"}
}

type rawReadHold struct {
	client       *redis.Client
	readers, tok string
}

type rawWriteHold struct {
	client      *redis.Client
	writer, tok string
}

func (l *rawRWLocker) obtain(ctx context.Context, key string) (held, error) {
	keys, tok, err := l.acquire(ctx, key, "w")
	if err != nil {
		return nil, err
	}
	return &rawWriteHold{client: l.client, writer: keys[1], tok: tok}, nil
}

func (l *rawRWLocker) obtainRead(ctx context.Context, key string) (held, error) {
	keys, tok, err := l.acquire(ctx, key, "r")
	if err != nil {
		return nil, err
	}
	return &rawReadHold{client: l.client, readers: keys[0], tok: tok}, nil
}

// acquire polls until the hold of the mode ("r" or "w") is taken, ctx
// ends or Redis fails; a writer that fails withdraws its intent.
func (l *rawRWLocker) acquire(ctx context.Context, key, mode string) (keys []string, tok string, err error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	token := hex.EncodeToString(b[:])
	all := rawRWKeys(key)
	defer func() {
		if err != nil && mode == "w" {
			// Bounded on its own: ctx has usually ended.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = l.client.ZRem(wctx, all[2], token).Err()
		}
	}()
	for {
		n, err := rawRWAcquire.Run(ctx, l.client, all, mode, token, l.ttl.Milliseconds(), l.intentLife.Milliseconds()).Int()
		if err != nil && ctx.Err() != nil {
			return nil, "", fmt.Errorf("%w: %w", errNotObtained, err)
		}
		if err != nil {
			return nil, "", err
		}
		if n == 1 {
			return all, token, nil
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("%w: %w", errNotObtained, ctx.Err())
		}
		if l.retry > 0 {
			time.Sleep(l.retry)
		}
	}
}

func (h *rawReadHold) release(ctx context.Context) error {
	n, err := h.client.ZRem(ctx, h.readers, h.tok).Result()
	if err == nil && n != 1 {
		err = errors.New("read hold was not held at release")
	}
	return err
}

func (h *rawWriteHold) release(ctx context.Context) error {
	n, err := rawRelease.Run(ctx, h.client, []string{h.writer}, h.tok).Int64()
	if err == nil && n != 1 {
		err = errors.New("write hold was not held at release")
	}
	return err
}

func (l *rawRWLocker) close() { _ = l.client.Close() }

// --- locksmith (the working tree) ----------------------------------------------

// smithRWLib is locksmith's RWMutex as its documentation shows it: a
// Locker made with no options, an RWMutex value made where it is used,
// and the lock rows' TTL and retry strategy given to each call.
type smithRWLib struct{}

func (smithRWLib) name() string { return "locksmith rwmutex" }

func (smithRWLib) runsOn() topology { return mainServer }

func (smithRWLib) settings() string {
	return "working tree; New(client), each call RWMutex(key).ObtainRead or ObtainWrite(ctx, WithTTL(10s), WithRetry(LinearBackoff(50ms))), woken by release announcements, waits bounded by the ctx deadline"
}

func (smithRWLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{rw: true})
}

// smithExclusiveLib runs the read-write workload on locksmith's plain
// lock: every read and every write obtains the one lock, as a program
// without a read-write lock would.
type smithExclusiveLib struct{}

func (smithExclusiveLib) name() string { return "locksmith lock (exclusive)" }

func (smithExclusiveLib) runsOn() topology { return mainServer }

func (smithExclusiveLib) settings() string {
	return "working tree; New(client), every read and write alike Obtain(ctx, key, WithTTL(10s), WithRetry(LinearBackoff(50ms))) of one plain lock: the workload without shared reads"
}

func (smithExclusiveLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{perCall: true})
}
