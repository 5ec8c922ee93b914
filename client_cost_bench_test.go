package locksmith

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// BenchmarkClientCost measures the client's own work in an uncontended
// cycle, without the network: a go-redis hook answers each command as a
// free lock's server would, so ns/op and allocs/op are locksmith's and
// go-redis's command handling alone: the rows' ratios hold from run to
// run within a few percent, where those of the benchmarks over a real
// server move by tens of percent (see docs/performance.md). The raw row is the bench module's raw loop
// (SET NX and an EVALSHA compare-and-delete), the raw-set row its
// one-script set of two keys (one script to take both, one to release
// them); the others are the README's calls, the quorum row's on three
// such servers (NewQuorum's defaults: the restart guard finds each up for
// an hour, and every call fans out to the three). Run it with
//
//	go test -run '^$' -bench ClientCost -benchmem
func BenchmarkClientCost(b *testing.B) {
	ctx := context.Background()
	raw := redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
	noop := func(context.Context) error { return nil }
	for _, row := range []struct {
		name  string
		cycle func(c *redis.Client, l *Locker) error
	}{
		{"raw", func(c *redis.Client, _ *Locker) error {
			token := uuid.NewString()
			if err := c.SetNX(ctx, "k", token, 10*time.Second).Err(); err != nil {
				return err
			}
			return raw.EvalSha(ctx, c, []string{"k"}, token).Err()
		}},
		{"try-once", func(_ *redis.Client, l *Locker) error {
			lk, err := l.Obtain(ctx, "k", WithTTL(10*time.Second))
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
		{"withlock", func(_ *redis.Client, l *Locker) error {
			return l.WithLock(ctx, "k", noop, WithTTL(10*time.Second))
		}},
		{"raw-set", func(c *redis.Client, _ *Locker) error {
			token := uuid.NewString()
			if err := rawSetObtain.EvalSha(ctx, c, setKeys, token, 10000).Err(); err != nil {
				return err
			}
			return rawSetRelease.EvalSha(ctx, c, setKeys, token).Err()
		}},
		{"set", func(_ *redis.Client, l *Locker) error {
			lk, err := l.ObtainAll(ctx, setKeys, WithTTL(10*time.Second))
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
		{"quorum", func(_ *redis.Client, l *Locker) error {
			lk, err := l.Obtain(ctx, "k", WithTTL(10*time.Second))
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
	} {
		b.Run(row.name, func(b *testing.B) {
			hook := freeServer{release: raw.Hash(), rawSet: [2]string{rawSetObtain.Hash(), rawSetRelease.Hash()}}
			var clients []redis.UniversalClient
			for range 3 {
				c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
				c.AddHook(hook)
				clients = append(clients, c)
			}
			c := clients[0].(*redis.Client)
			var l *Locker
			if row.name == "quorum" {
				l = NewQuorum(clients)
			} else {
				l = New(c)
			}
			b.Cleanup(func() {
				_ = l.Close()
				for _, c := range clients {
					_ = c.Close()
				}
			})
			b.ReportAllocs()
			for b.Loop() {
				if err := row.cycle(c, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// freeServer is a go-redis hook that answers, without sending them, the
// commands of an uncontended cycle as a server would whose lock is free:
// SET NX (or a quorum's try script) takes it, a release script releases
// it, a set's scripts take and release both keys of setKeys, the
// permission check finds nothing refused, and INFO server tells the
// restart guard that the server has been up for an hour. Any other
// command fails, so that the benchmark cannot measure a path it does not
// expect.
type freeServer struct {
	release string
	rawSet  [2]string // the raw set's obtain and release scripts
}

// The raw set rows' scripts and keys: copies of the bench module's
// one-script set (setScriptObtainSrc and setScriptReleaseSrc in
// bench/sets.go, which this module cannot import; a test there checks that
// they are the same): MSETNX of every key then PEXPIRE of each; GET of
// every key, then one DEL if all hold the token.
var (
	setKeys       = []string{"{s}:a", "{s}:b"}
	rawSetObtain  = redis.NewScript(rawSetObtainSrc)
	rawSetRelease = redis.NewScript(rawSetReleaseSrc)
)

const (
	rawSetObtainSrc = `
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
	rawSetReleaseSrc = `
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then
    return 0
  end
end
return redis.call('DEL', unpack(KEYS))
`
)

func (freeServer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (freeServer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h freeServer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		switch c := cmd.(type) {
		case *redis.StringCmd:
			if cmd.Name() == "info" {
				// A quorum's restart guard: up for an hour.
				c.SetVal("run_id:" + strings.Repeat("f", 40) + "\r\nuptime_in_seconds:3600\r\n")
				return nil
			}
		case *redis.StatusCmd:
			if cmd.Name() == "set" {
				c.SetVal("OK")
				return nil
			}
		case *redis.BoolCmd:
			if cmd.Name() == "set" {
				c.SetVal(true)
				return nil
			}
		case *redis.Cmd:
			if cmd.Name() == "evalsha" && len(args) > 1 {
				switch args[1] {
				case releaseLua.sha, tryLua.sha, h.release, h.rawSet[0]:
					c.SetVal(int64(1))
					return nil
				case multiReleaseLua.sha, h.rawSet[1]:
					c.SetVal(int64(len(setKeys)))
					return nil
				case multiTryLua.sha:
					c.SetVal([]any{int64(0), int64(0), int64(0)})
					return nil
				case probeLua.sha:
					c.SetVal([]any{})
					return nil
				}
			}
		}
		err := fmt.Errorf("freeServer: unexpected %v", args)
		cmd.SetErr(err)
		return err
	}
}
