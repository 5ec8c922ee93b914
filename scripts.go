package locksmith

import (
	"context"

	"github.com/redis/go-redis/v9"
)

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
