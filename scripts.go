package locksmith

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every Lua script of the library is a file of scripts/, named by what it
// serves: lock_* a lock (and an election's term, which is one), permit_* a
// semaphore's permit, rw_* a read-write lock's hold, hold_* the handle of
// either of those two (both are members of one sorted set per name: see
// store_hold.go), multi_* a set of locks taken at once, election_* an
// election, once_* Once, acl_probe.lua the check
// of the connected user's permissions (acl.go). The table below
// lists, for each script, its preludes, in order, then its own file.
//
// A prelude, lib_*, is what several scripts share, written once: it only
// defines functions and locals, and writes nothing until a script calls
// it. lib_hold.lua starts every script of a hold kept in a sorted set: it
// reads TIME (the one command it runs, before any write) and defines keep,
// the set's expiry. lib_queue.lua defines pop_entry, the pop of a handoff
// queue, for the two releases that hand over (lock_release.lua,
// permit_release.lua). lib_fence.lua defines take_fence, the issuing of a
// fencing token, for every script that takes one.
//
// Each script touches the lock key and its companion keys (see Keys, in
// inspect.go), all passed in KEYS and all in one cluster slot, so it runs
// on Redis Cluster too. Each file's header states its KEYS, ARGV and reply, and
// what it runs before its first write: Redis does not undo a script that
// fails halfway, so what can be refused (TIME, the reads of companion
// keys) comes first.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

var (
	// A lock's (store.go, store_redis.go; the acquire is obtainScripts).
	tryLua     = newScript("lock_try.lua")
	refreshLua = newScript("lock_refresh.lua")
	pttlLua    = newScript("lock_pttl.lua")
	confirmLua = newScript("lib_fence.lua", "lock_confirm.lua")
	inspectLua = newScript("lock_inspect.lua")

	// A semaphore's (store_semaphore.go).
	permitAcquireLua = newScript("lib_hold.lua", "lib_fence.lua", "permit_acquire.lua")
	permitInspectLua = newScript("lib_hold.lua", "permit_inspect.lua")
	permitReleaseLua = newScript("lib_hold.lua", "lib_queue.lua", "lib_fence.lua", "permit_release.lua")
	permitConfirmLua = newScript("lib_hold.lua", "lib_fence.lua", "permit_confirm.lua")

	// A read-write lock's (store_rwmutex.go).
	rwAcquireLua = newScript("lib_hold.lua", "lib_fence.lua", "rw_acquire.lua")
	rwInspectLua = newScript("lib_hold.lua", "rw_inspect.lua")

	// The handle of a permit or of a read-write lock's hold (store_hold.go).
	holdReleaseLua = newScript("lib_hold.lua", "hold_release.lua")
	holdRefreshLua = newScript("lib_hold.lua", "hold_refresh.lua")
	holdPTTLLua    = newScript("lib_hold.lua", "hold_pttl.lua")

	// An election's (leader.go).
	leaderLua   = newScript("election_leader.lua")
	proclaimLua = newScript("election_proclaim.lua")

	// A set of locks taken at once (store_multi.go).
	multiObtainLua  = newScript("lib_fence.lua", "multi_obtain.lua")
	multiTryLua     = newScript("multi_try.lua")
	multiRefreshLua = newScript("multi_refresh.lua")
	multiPTTLLua    = newScript("multi_pttl.lua")

	// Once's (once.go).
	completeLua = newScript("once_complete.lua")

	// The permissions probe (acl.go).
	probeLua = newScript("acl_probe.lua")
)

// The release script comes in two variants, one per command that
// announces a release: PUBLISH, and SPUBLISH on Redis Cluster (see
// redisStore.publish). The command is in the script's first line, not an
// argument: each argument costs the server time at every call.
var (
	releaseLua        = releaseVariant("publish", "lock_release.lua")
	releaseShardedLua = releaseVariant("spublish", "lock_release.lua")
)

// A set's release (multi_release.lua) comes in the same two variants.
var (
	multiReleaseLua        = releaseVariant("publish", "multi_release.lua")
	multiReleaseShardedLua = releaseVariant("spublish", "multi_release.lua")
)

// releaseVariant returns the release script file (lock_release.lua or
// multi_release.lua) that announces with cmd.
func releaseVariant(cmd, file string) luaScript {
	return newLuaScript("local publish = '" + cmd + "'\n" +
		scriptSource("lib_queue.lua", "lib_fence.lua", file))
}

// The acquire script comes in one variant per set of keys it is given, so
// that each has a fixed KEYS list: the lock key, then the handoff queue
// when the caller is queued, then the fence counter with fencing (see
// obtainCall). A first line names them; lib_fence.lua and lock_obtain.lua
// follow. A script names only the keys it needs: on Redis Cluster, a
// script naming a key that does not exist (the queue, mostly) is refused
// while its slot migrates.
var obtainScripts = [4]luaScript{
	obtainVariant("KEYS[1], nil, nil"),
	obtainVariant("KEYS[1], nil, KEYS[2]"),
	obtainVariant("KEYS[1], KEYS[2], nil"),
	obtainVariant("KEYS[1], KEYS[2], KEYS[3]"),
}

// obtainVariant returns the acquire script with keys, the Lua expressions
// of its lock_key, queue_key and fence_key.
func obtainVariant(keys string) luaScript {
	return newLuaScript("local lock_key, queue_key, fence_key = " + keys + "\n" +
		scriptSource("lib_fence.lua", "lock_obtain.lua"))
}

// newScript returns the script made of files of scripts/, joined in
// order: its preludes, then its own.
func newScript(files ...string) luaScript { return newLuaScript(scriptSource(files...)) }

// scriptSource returns the text of files of scripts/, joined in order. It
// panics when one is missing: the table names embedded files only.
func scriptSource(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		src, err := scriptFiles.ReadFile("scripts/" + f)
		if err != nil {
			panic("locksmith: " + err.Error())
		}
		b.Write(src)
	}
	return b.String()
}

// luaScript is one of the library's Lua scripts, run with arguments laid
// out by the caller in one slice, so that a call builds nothing it has
// already built. It sends EVALSHA, and EVAL when the server answers
// NOSCRIPT (its script cache was flushed, or it is a new primary after a
// failover), so callers never see that error: alone (run, send) or in a
// pipeline (pipelined).
//
// The arguments are laid out as EVALSHA takes them, with two slots left
// free at the front: {_, _, number of keys, keys..., arguments...}.
// prepare fills the free slots; go-redis then sends the slice as it is.
type luaScript struct {
	src, sha any // the source and its SHA1, as go-redis takes them
}

func newLuaScript(src string) luaScript {
	return luaScript{src: src, sha: redis.NewScript(src).Hash()}
}

// processor is what sends a prepared command: every go-redis client.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// pipeliner is what opens a pipeline: every go-redis client.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// run runs the script on c with args, laid out with two free slots at
// the front (see luaScript). It fills them (see prepare) and sends it
// (see send); args must not be shared with another call.
func (s luaScript) run(ctx context.Context, c processor, args []any) *redis.Cmd {
	return s.send(ctx, c, s.prepare(args))
}

// prepare fills the two free slots at the front of args, {_, _, number
// of keys, keys..., arguments...}, with EVALSHA and the script's SHA1,
// and returns args, for send and pipelined.
func (s luaScript) prepare(args []any) []any {
	args[0], args[1] = evalshaCmd, s.sha
	return args
}

// evalshaCmd and evalCmd are the commands that run a script, converted
// once for go-redis.
var evalshaCmd, evalCmd any = "evalsha", "eval"

// send runs the script on c with args, prepared by prepare. It sends
// EVALSHA and, when the server does not know the script, EVAL. It writes
// nothing into args, and neither does go-redis, which only reads a
// command's arguments: the masters of a quorum, asked at once, share
// them.
func (s luaScript) send(ctx context.Context, c processor, args []any) *redis.Cmd {
	cmd := s.command(ctx, args, false)
	_ = c.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = s.command(ctx, args, true)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// pipelined runs the script on c with args, prepared by prepare, in one
// pipeline with the commands that more adds after it, and, when the
// server does not know the script, sends the pipeline again with EVAL:
// more is called once per pipeline sent, and must add new commands each
// time. Like send, it writes nothing into args.
func (s luaScript) pipelined(ctx context.Context, c pipeliner, args []any, more func(redis.Pipeliner)) *redis.Cmd {
	exec := func(eval bool) *redis.Cmd {
		pipe := c.Pipeline()
		cmd := s.command(ctx, args, eval)
		_ = pipe.Process(ctx, cmd)
		more(pipe)
		_, _ = pipe.Exec(ctx)
		return cmd
	}
	cmd := exec(false)
	if noScript(cmd.Err()) {
		cmd = exec(true)
	}
	return cmd
}

// command returns the command that runs the script with args, prepared
// by prepare: EVALSHA with args itself or, with eval, EVAL with a copy.
func (s luaScript) command(ctx context.Context, args []any, eval bool) *redis.Cmd {
	if eval {
		args = append([]any{evalCmd, s.src}, args[2:]...)
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know.
func noScript(err error) bool {
	// HasErrorPrefix costs an allocation even for a nil error: ask only
	// when there is one.
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
