package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/locksmith-go/locksmith"
	"github.com/redis/go-redis/v9"
)

// smithCommandsLib sends, from a loop as bare as the raw baseline's, the
// very commands that locksmith's try once sends for a free key: SET key
// token PX 10000 NX, then locksmith's release script by EVALSHA, with the
// keys and arguments locksmith gives it. It learns them for each key from
// locksmith itself, the first time it meets the key (in the warm-up): a
// Locker on a client of its own obtains and releases the key once, and a
// hook on that client keeps the release's arguments. So the try once row
// less this one is locksmith's own client code, and this one less the raw
// baseline is what locksmith asks of the protocol (a longer script with a
// second key and the release channel, UUID tokens). Each cycle also finds
// the key's release in a map under a mutex, which locksmith does not do:
// if anything, the row understates what locksmith's own code costs. It
// runs only in the uncontended scenarios: it never waits.
type smithCommandsLib struct{}

func (smithCommandsLib) name() string { return "locksmith's commands, raw" }

func (smithCommandsLib) runsOn() topology { return mainServer }

func (smithCommandsLib) uncontendedOnly() {}

func (smithCommandsLib) settings() string {
	return "locksmith try once's commands (SET NX PX, then its release script by EVALSHA with the keys and arguments locksmith gave it for the key) sent by a loop like the raw baseline's; a diagnostic row: the client code of locksmith is what separates it from try once"
}

func (smithCommandsLib) newLocker(d *deployment) (locker, error) {
	c, err := newGoRedis(d.url())
	if err != nil {
		return nil, err
	}
	teach, err := newGoRedis(d.url())
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	l := &smithCommandsLocker{client: c, teach: teach, releases: map[string]learned{}, caught: map[string][]any{}}
	teach.AddHook(releaseCatcher{l})
	l.teacher = locksmith.New(teach)
	return l, nil
}

// learned is the release locksmith sent for a key: its arguments, and
// where in them the token goes.
type learned struct {
	args  []any
	token int
}

type smithCommandsLocker struct {
	client  *redis.Client
	teach   *redis.Client
	teacher *locksmith.Locker

	mu       sync.Mutex
	releases map[string]learned // by key
	caught   map[string][]any   // the teacher's last EVALSHA by its first key
}

// releaseCatcher keeps the arguments of every EVALSHA its Locker's client
// sends, by the script's first key (the lock key): calls learning
// different keys run at once.
type releaseCatcher struct{ l *smithCommandsLocker }

func (releaseCatcher) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h releaseCatcher) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 3 {
			key, _ := args[3].(string)
			h.l.mu.Lock()
			h.l.caught[key] = slices.Clone(args)
			h.l.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (releaseCatcher) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// learn returns the release locksmith sends for key, learning it first if
// need be.
func (l *smithCommandsLocker) learn(ctx context.Context, key string) (learned, error) {
	l.mu.Lock()
	r, ok := l.releases[key]
	l.mu.Unlock()
	if ok {
		return r, nil
	}
	lk, err := l.teacher.Obtain(ctx, key, locksmith.WithTTL(lockTTL))
	if err != nil {
		return learned{}, fmt.Errorf("learning the release of %q: %w", key, err)
	}
	if err := lk.Release(ctx); err != nil {
		return learned{}, fmt.Errorf("learning the release of %q: %w", key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r.args = l.caught[key]
	delete(l.caught, key) // kept in releases from here on
	r.token = slices.Index(r.args, any(lk.Token()))
	if r.token < 0 {
		return learned{}, fmt.Errorf("learning the release of %q: no token in %v", key, r.args)
	}
	l.releases[key] = r
	return r, nil
}

func (l *smithCommandsLocker) obtain(ctx context.Context, key string) (held, error) {
	r, err := l.learn(ctx, key)
	if err != nil {
		return nil, err
	}
	// A token made as locksmith's randomToken makes it (unexported): a
	// random version 4 UUID's text, in one allocation.
	var u uuid.UUID
	_, _ = rand.Read(u[:]) // never fails on Linux
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	token := u.String()
	set := redis.NewStatusCmd(ctx, "set", key, token, "px", lockTTL.Milliseconds(), "nx")
	_ = l.client.Process(ctx, set)
	switch err := set.Err(); {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("%w: %q is taken", errNotObtained, key)
	case err != nil:
		return nil, err
	}
	args := slices.Clone(r.args)
	args[r.token] = token
	return &smithCommandsHeld{client: l.client, args: args}, nil
}

type smithCommandsHeld struct {
	client *redis.Client
	args   []any
}

func (h *smithCommandsHeld) release(ctx context.Context) error {
	cmd := redis.NewCmd(ctx, h.args...)
	_ = h.client.Process(ctx, cmd)
	n, err := cmd.Int64()
	if err == nil && n != 1 {
		err = errors.New("lock was not held at release")
	}
	return err
}

func (l *smithCommandsLocker) close() {
	_ = l.teacher.Close()
	_ = l.teach.Close()
	_ = l.client.Close()
}
