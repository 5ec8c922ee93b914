package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith"
	"github.com/redis/go-redis/v9"
)

// TestSmithCommandsSendsLocksmithsCommands checks the diagnostic row
// against a private redis-server: a cycle sends what a cycle of
// locksmith's try once sends on its own client, command for command and
// argument for argument but the token; it takes and frees the key; and a
// taken key is not obtained.
func TestSmithCommandsSendsLocksmithsCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := privateDeployment(t)
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const key = "test:k"

	// What locksmith's try once sends, cycle by cycle: the second cycle,
	// when its scripts are known to the server.
	c, err := newGoRedis(d.url())
	check(err)
	defer c.Close()
	var want sent
	c.AddHook(&want)
	smith := locksmith.New(c)
	defer smith.Close()
	for range 2 {
		want.reset()
		lk, err := smith.Obtain(ctx, key, locksmith.WithTTL(lockTTL))
		check(err)
		check(lk.Release(ctx))
		want.mask(lk.Token())
	}

	lib, err := smithCommandsLib{}.newLocker(d)
	check(err)
	defer lib.close()
	l := lib.(*smithCommandsLocker)
	var got sent
	l.client.AddHook(&got)
	// The first round learns the key's release and dials the row's
	// connections (go-redis sends HELLO and CLIENT commands as it does):
	// the rounds after it are the row's steady cycles.
	for round := range 3 {
		got.reset()
		h, err := l.obtain(ctx, key)
		check(err)
		token, err := d.admins[0].Get(ctx, key).Result()
		check(err)
		check(h.release(ctx))
		got.mask(token)
		if n, err := d.admins[0].Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Fatalf("round %d: the key exists (%d, %v) after the release", round, n, err)
		}
		if g, w := got.String(), want.String(); round > 0 && g != w {
			t.Fatalf("round %d: the row sent\n%s\nlocksmith's try once\n%s", round, g, w)
		}
	}

	held, err := smith.Obtain(ctx, key, locksmith.WithTTL(lockTTL))
	check(err)
	if h, err := l.obtain(ctx, key); !errors.Is(err, errNotObtained) {
		if h != nil {
			_ = h.release(ctx)
		}
		t.Fatalf("obtain of a held key: got %v, want not obtained", err)
	}
	check(held.Release(ctx))
}

// sent is a go-redis hook that notes the commands its client sends one
// by one.
type sent struct {
	mu   sync.Mutex
	cmds [][]any
}

func (s *sent) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds = nil
}

// mask replaces token, wherever it is an argument, with "<token>".
func (s *sent) mask(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, args := range s.cmds {
		for i, a := range args {
			if a == any(token) {
				args[i] = "<token>"
			}
		}
	}
}

func (s *sent) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out string
	for _, args := range s.cmds {
		out += fmt.Sprintln(args...)
	}
	return out
}

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.cmds = append(s.cmds, slices.Clone(cmd.Args()))
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook notes nothing: neither row sends a pipeline in a
// cycle, and go-redis sends a new connection's set-up (HELLO, CLIENT
// SETINFO) as one.
func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
