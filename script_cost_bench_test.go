package locksmith

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// BenchmarkScriptCost measures what Redis spends inside one command of each
// shape the uncontended path sends, from INFO commandstats (usec per
// call, reported as cmd-µs): a plain SET NX PX against the try script,
// and compare-and-delete scripts with more keys and arguments beside the
// release script with and without its announcement, and as a quorum's
// master runs it (no queue) beside a lean compare-and-delete that
// announces, the script a quorum-only release would be. It is the evidence
// for the costs that docs/performance.md gives per argument, per key and
// per PUBLISH. Each cycle also sends an unmeasured command that puts the
// key back (DEL before an acquire, SET before a release). Run it with
//
//	go test -run '^$' -bench ScriptCost -count 5
func BenchmarkScriptCost(b *testing.B) {
	srv := redistest.New(b)
	c := srv.Client(b)
	ctx := context.Background()
	cad := newLuaScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
	src := releaseLua.src.(string)
	silent := strings.Replace(src, "redis.pcall(publish, ARGV[2], msg)", "", 1)
	if silent == src {
		b.Fatal("lock_release.lua no longer announces with redis.pcall(publish, ARGV[2], msg): update this benchmark")
	}
	releaseSilent := newLuaScript(silent)
	cadPublish := newLuaScript(`if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) redis.pcall('publish', ARGV[2], '') return 1`)
	free2 := func() error { return c.Del(ctx, setKeys...).Err() }
	held2 := func() error { return c.MSet(ctx, setKeys[0], "tok", setKeys[1], "tok").Err() }
	free := func() error { return c.Del(ctx, "k").Err() }
	held := func() error { return c.Set(ctx, "k", "tok", 0).Err() }
	script := func(s luaScript, args ...any) func() (any, error) {
		return func() (any, error) { return s.send(ctx, c, s.prepare(append([]any{nil, nil}, args...))).Result() }
	}
	for _, v := range []struct {
		name    string
		stat    string // the commandstats line measured
		prepare func() error
		run     func() (any, error)
	}{
		{"set-nx-px", "set", free, func() (any, error) { return c.SetNX(ctx, "k", "tok", 10e9).Result() }},
		{"lock_try.lua", "evalsha", free, script(tryLua, 1, "k", "tok", 10000)},
		{"cad/1-key-1-arg", "evalsha", held, script(cad, 1, "k", "tok")},
		{"cad/1-key-4-args", "evalsha", held, script(cad, 1, "k", "tok", "a", "b", "c")},
		{"cad/2-keys-1-arg", "evalsha", held, script(cad, 2, "k", "k2", "tok")},
		{"lock_release.lua/2-keys-2-args", "evalsha", held, script(releaseLua, 2, "k", "k:queue", "tok", "k:released")},
		{"lock_release.lua/no-publish", "evalsha", held, script(releaseSilent, 2, "k", "k:queue", "tok", "k:released")},
		{"lock_release.lua/1-key-2-args", "evalsha", held, script(releaseLua, 1, "k", "tok", "k:released")},
		{"cad-publish/1-key-2-args", "evalsha", held, script(cadPublish, 1, "k", "tok", "k:released")},
		{"raw-set-obtain/2-keys", "evalsha", free2, script(newLuaScript(rawSetObtainSrc), 2, setKeys[0], setKeys[1], "tok", 10000)},
		{"multi_try.lua/2-keys", "evalsha", free2, script(multiTryLua, 2, setKeys[0], setKeys[1], "tok", 10000)},
		{"raw-set-release/2-keys", "evalsha", held2, script(newLuaScript(rawSetReleaseSrc), 2, setKeys[0], setKeys[1], "tok")},
		{"multi_release.lua/2-keys", "evalsha", held2, script(multiReleaseLua, 4, setKeys[0], setKeys[1], "{s}:a:q", "{s}:b:q", "tok", 2, "1", "", "{s}:a:r", "{s}:b:r")},
	} {
		b.Run(v.name, func(b *testing.B) {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := v.prepare(); err != nil {
					b.Fatal(err)
				}
				if res, err := v.run(); err != nil || res == int64(0) || res == false {
					b.Fatalf("%s = %v, %v", v.name, res, err)
				}
			}
			us, err := usecPerCall(ctx, c, v.stat)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(us, "cmd-µs")
		})
	}
}

// usecPerCall reads the usec_per_call of cmd from INFO commandstats.
func usecPerCall(ctx context.Context, c *redis.Client, cmd string) (float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				var us float64
				_, err := fmt.Sscan(v, &us)
				return us, err
			}
		}
	}
	return 0, fmt.Errorf("no cmdstat_%s in INFO commandstats", cmd)
}
