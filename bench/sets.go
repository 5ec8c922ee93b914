package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/locksmith-go/locksmith"
	"github.com/redis/go-redis/v9"
)

// The libraries of the set scenarios, whose workers each take a set of
// keys at once (see setworkload.go for the workload). Each row is written
// the way its documentation shows, and comes in two forms: trying once in
// the uncontended scenario, waiting in the contended one. Only locksmith
// has a released call for a set; the other rows are what a user of
// redislock v0.9.4 can write (two Obtain calls in sorted order) and a
// reimplementation, written for this benchmark, of the approach of the
// multi-key ObtainMulti merged into redislock's main branch but in no
// release yet (v0.9.4 is its newest).

// A setLocker is a locker that also takes a set of keys at once.
type setLocker interface {
	locker
	// obtainSet takes the lock on every key of keys (sorted, distinct, in
	// one hash slot), waiting as the row does, and appends what it holds
	// to into. On error it holds nothing, and the error matches
	// errNotObtained when the row gave up or ctx ended.
	obtainSet(ctx context.Context, keys []string, into *heldSet) error
}

// A heldSet is what one set acquisition holds: one handle for a set taken
// at once, or one per key. Its worker reuses it, so that the adapters add
// no allocation of their own.
type heldSet struct{ parts []held }

// release releases every part, the last taken first, and empties h.
func (h *heldSet) release(ctx context.Context) error {
	var err error
	for i := len(h.parts) - 1; i >= 0; i-- {
		err = errors.Join(err, h.parts[i].release(ctx))
		h.parts[i] = nil
	}
	h.parts = h.parts[:0]
	return err
}

// obtainOne is obtain of a setLocker: a set of one key.
func obtainOne(ctx context.Context, l setLocker, key string) (held, error) {
	h := new(heldSet)
	if err := l.obtainSet(ctx, []string{key}, h); err != nil {
		return nil, err
	}
	return h, nil
}

// setRetryInterval and setRetries are redislock's example retry
// (ExampleClient_Obtain_retry in v0.9.4: "Retry every 100ms, for up-to
// 3x"), which its ObtainMulti takes in the same Options.
const (
	setRetryInterval = 100 * time.Millisecond
	setRetries       = 3
)

// setLibraries returns the set libraries in table order, the baseline
// first, each waiting when wait is set (the contended scenario) and
// trying once otherwise. All of them run on the main server.
func setLibraries(rawRetry time.Duration, wait bool) []lib {
	libs := []lib{
		setScriptBase{setScriptLib{wait: wait, interval: rawRetry}},
		setScriptLib{wait: wait, interval: setRetryInterval, retries: setRetries},
		smithSetLib{wait: wait},
		smithPairLib{wait: wait},
		redislockPairLib{wait: wait},
	}
	if !wait {
		// Trying once, the two one-script rows are the same.
		libs = append(libs[:1], libs[2:]...)
	}
	return libs
}

// --- one script per attempt: the approach of redislock's ObtainMulti ---------

// setScriptLib takes a set in one script per attempt: MSETNX of every key
// to the caller's token (all or nothing), then PEXPIRE of each; it
// releases with one compare-and-delete script over every key. Waiting, it
// polls: an attempt every interval, up to retries more (0: until ctx
// ends). It is the approach of the ObtainMulti on bsm/redislock's main
// branch (PR #70, in no release), reimplemented here from its description
// and not redislock's code: the scripts, the token and the loop are this
// benchmark's.
type setScriptLib struct {
	wait     bool
	interval time.Duration // between attempts when waiting (0: at once)
	retries  int           // attempts after the first when waiting; 0: until ctx ends
}

// setScriptBase is the setScriptLib that heads the set tables: polling at
// -raw-retry until ctx ends, the limit of polling as rawLib is for one key.
type setScriptBase struct{ setScriptLib }

func (setScriptBase) baseline() {}

func (setScriptBase) name() string { return "one-script SET NX set (polling)" }

func (s setScriptLib) name() string {
	return fmt.Sprintf("one-script SET NX set, %v x%d", s.interval, s.retries)
}

func (setScriptLib) runsOn() topology { return mainServer }

func (s setScriptLib) settings() string {
	wait := retryText(s.interval) + " until ctx ends"
	if s.retries > 0 {
		wait = fmt.Sprintf("retried every %v, at most %d times (redislock's example retry, LimitRetry(LinearBackoff(%v), %d))", s.interval, s.retries, s.interval, s.retries)
	}
	return fmt.Sprintf("this benchmark's reimplementation of the approach of redislock's unreleased ObtainMulti (not its code): go-redis v9 EVALSHA of one script per attempt, MSETNX of every key to the token then PEXPIRE of each (TTL %v), EVALSHA compare-and-delete of every key to release; uncontended one attempt, contended %s",
		lockTTL, wait)
}

func (s setScriptLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return &setScriptLocker{client: c, lib: s}, nil
}

// setScriptObtain takes a set. KEYS: the set's keys. ARGV[1]: the
// caller's token, ARGV[2]: the TTL in ms. Returns 1 when taken, 0 when
// any key is held (then nothing is written).
var setScriptObtain = redis.NewScript(setScriptObtainSrc)

const setScriptObtainSrc = `
local args = {}
for i, key in ipairs(KEYS) do
  args[2 * i - 1] = key
  args[2 * i] = ARGV[1]
end
if redis.call('MSETNX', unpack(args)) == 0 then
  return 0
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
`

// setScriptRelease deletes a set if every key still holds the caller's
// token. KEYS: the set's keys. ARGV[1]: the token. Returns the keys
// deleted: all of them, or 0.
var setScriptRelease = redis.NewScript(setScriptReleaseSrc)

const setScriptReleaseSrc = `
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
end
return redis.call('DEL', unpack(KEYS))
`

type setScriptLocker struct {
	client *redis.Client
	lib    setScriptLib
}

type setScriptHeld struct {
	client *redis.Client
	keys   []string
	token  string
}

func (l *setScriptLocker) obtain(ctx context.Context, key string) (held, error) {
	return obtainOne(ctx, l, key)
}

func (l *setScriptLocker) obtainSet(ctx context.Context, keys []string, into *heldSet) error {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	token := hex.EncodeToString(b[:])
	ttl := lockTTL.Milliseconds()
	for attempt := 0; ; attempt++ {
		n, err := setScriptObtain.Run(ctx, l.client, keys, token, ttl).Int()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %w", errNotObtained, err)
		}
		if err != nil {
			return err
		}
		if n == 1 {
			into.parts = append(into.parts, &setScriptHeld{client: l.client, keys: keys, token: token})
			return nil
		}
		if !l.lib.wait || (l.lib.retries > 0 && attempt >= l.lib.retries) {
			return errNotObtained
		}
		if err := sleepCtx(ctx, l.lib.interval); err != nil {
			return fmt.Errorf("%w: %w", errNotObtained, err)
		}
	}
}

func (h *setScriptHeld) release(ctx context.Context) error {
	n, err := setScriptRelease.Run(ctx, h.client, h.keys, h.token).Int()
	if err == nil && n != len(h.keys) {
		err = errors.New("set was not held at release")
	}
	return err
}

func (l *setScriptLocker) close() { _ = l.client.Close() }

// sleepCtx waits for d, or until ctx ends, and returns ctx.Err() then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// --- locksmith (the working tree) ----------------------------------------------

// smithSetLib is locksmith's ObtainAll as its README calls it: a Locker
// made with no options, and the options given to each call: only the TTL
// when trying once (the default NoRetry), and the lock rows' retry
// strategy when waiting.
type smithSetLib struct{ wait bool }

func (smithSetLib) name() string { return "locksmith ObtainAll" }

func (smithSetLib) runsOn() topology { return mainServer }

func (smithSetLib) settings() string {
	return "working tree; New(client), each call ObtainAll(ctx, keys, WithTTL(10s)) uncontended (the default NoRetry: one attempt), ObtainAll(ctx, keys, WithTTL(10s), WithRetry(LinearBackoff(50ms))) contended, waits bounded by the ctx deadline"
}

func (s smithSetLib) newLocker(d *deployment) (locker, error) {
	return mainSmith(d, smithLocker{tryOnce: !s.wait, perCall: s.wait})
}

// obtainSet takes the set with ObtainAll, with the options per call as
// obtain passes them.
func (l *smithLocker) obtainSet(ctx context.Context, keys []string, into *heldSet) error {
	var (
		lk  *locksmith.Lock
		err error
	)
	if l.tryOnce {
		lk, err = l.locker.ObtainAll(ctx, keys, locksmith.WithTTL(10*time.Second))
	} else {
		lk, err = l.locker.ObtainAll(ctx, keys, locksmith.WithTTL(10*time.Second), smithRetry())
	}
	h, err := smithResult(lk, err)
	if err != nil {
		return err
	}
	into.parts = append(into.parts, h)
	return nil
}

// smithPairLib takes a set as two of locksmith's plain locks, one Obtain
// after the other in sorted order (so that two callers never wait for each
// other in a cycle), as a program without ObtainAll would; options per
// call as in smithSetLib.
type smithPairLib struct{ wait bool }

func (smithPairLib) name() string { return "locksmith two Obtain, sorted" }

func (smithPairLib) runsOn() topology { return mainServer }

func (smithPairLib) settings() string {
	return "working tree; New(client), Obtain of each key in sorted order, each with WithTTL(10s) uncontended and WithTTL(10s), WithRetry(LinearBackoff(50ms)) contended (a waiting Obtain is queued and woken by releases), holding the first while it waits for the second; Release of each"
}

func (s smithPairLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	return eachLocker{&smithLocker{clients: []redis.UniversalClient{c}, locker: locksmith.New(c), tryOnce: !s.wait, perCall: s.wait}}, nil
}

// --- github.com/bsm/redislock v0.9.4 -----------------------------------------

// redislockPairLib takes a set as two of redislock's locks, one Obtain
// after the other in sorted order: v0.9.4, its newest release, has no
// call for several keys. Uncontended it tries once (nil Options, its
// README's first example); contended it retries as its example does,
// LimitRetry(LinearBackoff(100ms), 3), a strategy made for each call since
// LimitRetry counts the retries of every call that shares it.
type redislockPairLib struct{ wait bool }

func (redislockPairLib) name() string { return "redislock two Obtain, sorted" }

func (redislockPairLib) runsOn() topology { return mainServer }

func (redislockPairLib) settings() string {
	return fmt.Sprintf("bsm/redislock (no multi-key call in v0.9.4): Obtain of each key in sorted order, TTL %v, Options nil uncontended (no retry) and a new &Options{RetryStrategy: LimitRetry(LinearBackoff(%v), %d)} per call contended, as its example; holding the first while it waits for the second, released if the second is not obtained; Release of each",
		lockTTL, setRetryInterval, setRetries)
}

func (r redislockPairLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	l := &redislockLocker{client: c, locker: redislock.New(c)}
	if r.wait {
		l.opts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(setRetryInterval)}
		l.retries = setRetries
	}
	return eachLocker{l}, nil
}

// --- one lock after another --------------------------------------------------

// eachLocker takes a set as one lock per key, taken with obtain one after
// the other in the set's (sorted) order.
type eachLocker struct{ locker }

// obtainSet takes each key in turn; when one is not obtained, it releases
// those it took and holds nothing.
func (l eachLocker) obtainSet(ctx context.Context, keys []string, into *heldSet) error {
	for _, k := range keys {
		h, err := l.obtain(ctx, k)
		if err != nil {
			// Bounded on its own: ctx may have ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if rerr := into.release(rctx); rerr != nil {
				return fmt.Errorf("release after %v: %w", err, rerr)
			}
			return err
		}
		into.parts = append(into.parts, h)
	}
	return nil
}
