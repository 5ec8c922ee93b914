// Command locksmith runs a command under a distributed lock kept in Redis,
// so that of several hosts with the same cron entry only one runs the job
// at a time.
//
//	locksmith run     [flags] --key KEY -- COMMAND [ARGS...]
//	locksmith run     [flags] --key KEY --key KEY... -- COMMAND [ARGS...]
//	locksmith elect   [flags] --name NAME [--value VALUE] -- COMMAND [ARGS...]
//	locksmith elect   [flags] --name NAME --observe [--json]
//	locksmith status  [flags] --key KEY [--json] [--show-token]
//	locksmith status  [flags] --key KEY --watch [--interval D] [--json] [--show-token]
//	locksmith ls      [flags] [--prefix PREFIX] [--limit N] [--json]
//	locksmith release [flags] --key KEY --force
//	locksmith help [COMMAND]
//	locksmith --version
//
// run obtains the lock (trying once, or waiting up to --wait), runs
// COMMAND while a lease renews the lock, releases the lock when COMMAND
// exits and exits with COMMAND's status. If the lock is lost while COMMAND
// runs, COMMAND's process group gets SIGTERM, then SIGKILL after --grace.
// With --once it runs COMMAND only if no earlier run under the key has
// succeeded, and records a success; with --fencing COMMAND gets a fencing
// token to pass to the resource it writes; with --key given more than
// once it takes every key at once, or none; with --log-format json it
// reports what it does as JSON lines on stderr. status shows whether a
// lock is held and for how long, the last fencing token and the record of
// a success, and with --watch each change of them; ls lists the locks
// held under a prefix; release --force deletes a lock whatever its
// holder.
//
// elect is a candidate in a leader election: it runs COMMAND while it
// leads, stops it as run does when leadership is lost, and campaigns
// again when COMMAND exits (or, with --exit-with-command, exits with its
// status); elect --observe prints each change of leader.
//
// The Redis server is given by --redis URL or, to keep a password out of
// the process list, by the REDIS_URL environment variable: a server,
// Redis Cluster nodes (with --cluster), or sentinels (a URL with
// master_name). Run
// "locksmith help" for the exit statuses and "locksmith help COMMAND" for
// the flags and examples of each command.
//
// Install it with
//
//	go install github.com/locksmith-go/locksmith/cmd/locksmith@latest
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Exit statuses. run otherwise exits with COMMAND's own status, or 128+N
// when COMMAND died of signal N, as shells do. The values come from
// sysexits.h where one fits, so that they rarely clash with a command's
// ordinary 1 or 2.
const (
	exitOK = 0
	// exitUsage: bad flags or arguments, or release without --force.
	exitUsage = 64 // EX_USAGE
	// exitRedis: Redis could not be reached or answered an error, so
	// nobody knows whether the lock is free; nothing was run. (elect
	// without --exit-with-command tries again instead.)
	exitRedis = 69 // EX_UNAVAILABLE
	// exitHeld: the lock is held elsewhere (after --wait, if given);
	// nothing was run. --skip-ok turns it into exitOK.
	exitHeld = 75 // EX_TEMPFAIL
	// exitLost: the lock (for elect --exit-with-command, leadership) was
	// lost before COMMAND exited; COMMAND was stopped if it was still
	// running.
	exitLost = 79
	// exitDone: run --once found that a run under the key has already
	// succeeded; nothing was run. --skip-ok turns it into exitOK.
	exitDone = 80
	// exitCannotRun and exitNotFound are what shells use for a command
	// that cannot be executed and one that does not exist.
	exitCannotRun = 126
	exitNotFound  = 127
	// exitSignal is added to the number of the signal that ended COMMAND,
	// or that interrupted locksmith before COMMAND started.
	exitSignal = 128
)

func main() {
	// go-redis logs failed dials and the like; every failure that matters
	// reaches us as an error and is reported once, redacted.
	redis.SetLogger(discardLogger{})
	u := &ui{stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(u.main(os.Args[1:]))
}

// ui is where the command writes, and what it must never write.
type ui struct {
	stdout, stderr io.Writer
	// secrets are strings, such as the Redis password, that are replaced
	// in every message to stderr, whatever produced the message.
	secrets []string
	// log is the JSON log of run or elect --log-format json, to stderr;
	// nil otherwise (see startLog).
	log *slog.Logger
}

// main runs the subcommand named by args[0] and returns the exit status.
func (u *ui) main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(u.stderr, mainUsage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		return u.run(rest)
	case "elect":
		return u.elect(rest)
	case "status":
		return u.status(rest)
	case "ls":
		return u.ls(rest)
	case "release":
		return u.release(rest)
	case "help", "-h", "-help", "--help":
		return u.help(rest)
	case "version", "-version", "--version":
		fmt.Fprintln(u.stdout, versionLine())
		return exitOK
	default:
		u.errorf("unknown command %q\nRun 'locksmith help' for usage.", cmd)
		return exitUsage
	}
}

// help prints the help of the command named in args, or the overview.
func (u *ui) help(args []string) int {
	switch len(args) {
	case 0:
		fmt.Fprint(u.stdout, mainUsage)
		return exitOK
	case 1:
	default:
		u.errorf("usage: locksmith help [COMMAND]")
		return exitUsage
	}
	text, ok := commandHelp[args[0]]
	if !ok {
		u.errorf("no help for unknown command %q\nRun 'locksmith help' for usage.", args[0])
		return exitUsage
	}
	fmt.Fprint(u.stdout, text())
	return exitOK
}

// errorf prints one message, prefixed "locksmith: ", to stderr, with every
// secret replaced. With --log-format json it writes a record instead,
// whose msg is "error" and whose error attribute is the message.
func (u *ui) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if u.log != nil {
		u.log.LogAttrs(context.Background(), slog.LevelError, "error", slog.String("error", msg))
		return
	}
	for _, s := range u.secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	fmt.Fprintln(u.stderr, "locksmith: "+msg)
}

// errText returns err's message without the library's "locksmith: "
// prefix, which errorf already adds.
func errText(err error) string {
	return strings.TrimPrefix(err.Error(), "locksmith: ")
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
