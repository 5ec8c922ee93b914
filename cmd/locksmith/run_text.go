package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/locksmith-go/locksmith"
)

// What run says and passes on: its messages, and the environment of the
// command it runs.

// what names what run holds: the lock, a permit of the semaphore, or the
// set of locks.
func (r *runner) what() string {
	if set := r.flags.set(); set != nil {
		return "set of locks " + quoteKeys(set)
	}
	if r.flags.limit > 0 {
		return fmt.Sprintf("permit of semaphore %q", r.flags.key)
	}
	return fmt.Sprintf("lock %q", r.flags.key)
}

// heldText says that what run asks for is held, before "held elsewhere".
func (r *runner) heldText() string {
	if set := r.flags.set(); set != nil {
		return "a lock of the set " + quoteKeys(set) + " is"
	}
	if r.flags.limit > 0 {
		return fmt.Sprintf("all %d permits of semaphore %q are", r.flags.limit, r.flags.key)
	}
	return fmt.Sprintf("lock %q is", r.flags.key)
}

// interrupted reports that sig came while the lock was being obtained, so
// that COMMAND is not run, and returns the exit status.
func (r *runner) interrupted(sig os.Signal) int {
	r.report(slog.LevelWarn, "interrupted", fmt.Sprintf("got signal %q while obtaining %s; not running %q", sig, r.what(), r.command[0]),
		slog.String("signal", signalName(sig)))
	return exitSignal + signalNumber(sig)
}

// skipped returns the exit status of a run that skipped COMMAND: status,
// or exitOK with --skip-ok.
func (r *runner) skipped(status int) int {
	if r.flags.skipOK {
		return exitOK
	}
	return status
}

// doneText says that the job under --key has already completed, and when
// and where, if the record can be read.
func (r *runner) doneText() string {
	ctx, cancel := context.WithTimeout(context.Background(), r.flags.timeout)
	defer cancel()
	c, ok, err := r.locker.Completed(ctx, r.flags.key)
	if err != nil || !ok {
		// It was there a moment ago; the details are not worth failing for.
		return fmt.Sprintf("a run under %q has already succeeded", r.flags.key)
	}
	return fmt.Sprintf("a run under %q has already succeeded, at %s by %s", r.flags.key, c.At.Format(time.RFC3339), c.By)
}

// notRecorded returns what a message about a lost lock adds for --once
// when COMMAND succeeded: its success was not recorded.
func (r *runner) notRecorded(o outcome) string {
	if !r.flags.once || o.status != exitOK {
		return ""
	}
	return "; its success was not recorded, so the next run --once runs it again"
}

// withoutErr returns err without target: nil if err is target, or the
// other errors if err joins target to them, as WithLock and Once join
// their release error to the job's. It compares by identity on purpose,
// and looks only at the top-level join: target is the very value the job
// returned, which the library passes on unwrapped, whereas errors.Is would
// also match a join that merely contains it and drop the release error.
func withoutErr(err, target error) error {
	if err == target {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var rest []error
	for _, e := range joined.Unwrap() {
		if e != target {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// quoteKeys returns the keys of a set, quoted and separated by commas,
// for messages.
func quoteKeys(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = strconv.Quote(k)
	}
	return strings.Join(quoted, ", ")
}

// childEnv returns COMMAND's environment for run: lockEnv's for one lock.
// For a set, LOCKSMITH_KEY and LOCKSMITH_KEYS are its keys, sorted and
// separated by spaces (a key of a set has none); with fencing,
// LOCKSMITH_FENCE is the highest fence, as Fence returns it, and
// LOCKSMITH_FENCES each key's own, as KEY=FENCE separated by spaces.
func (r *runner) childEnv(lk *locksmith.Lock) []string {
	keys := lk.Keys()
	if len(keys) < 2 {
		return lockEnv(lk, r.flags.fencing)
	}
	all := strings.Join(keys, " ")
	env := append(os.Environ(),
		"LOCKSMITH_KEY="+all,
		"LOCKSMITH_KEYS="+all,
		"LOCKSMITH_TOKEN="+lk.Token(),
	)
	if r.flags.fencing {
		fences := make([]string, len(keys))
		for i, k := range keys {
			fences[i] = k + "=" + strconv.FormatInt(lk.FenceOf(k), 10)
		}
		env = append(env,
			"LOCKSMITH_FENCE="+strconv.FormatInt(lk.Fence(), 10),
			"LOCKSMITH_FENCES="+strings.Join(fences, " "),
		)
	}
	return env
}

// fencesOf returns the fence of each key of a set, for the JSON log.
func fencesOf(lk *locksmith.Lock) map[string]int64 {
	fences := make(map[string]int64)
	for _, k := range lk.Keys() {
		fences[k] = lk.FenceOf(k)
	}
	return fences
}

// lockEnv returns COMMAND's environment: locksmith's own, with the lock's
// key (as given, without the prefix) and token, and if fence is true its
// fencing token, in decimal.
func lockEnv(lk *locksmith.Lock, fence bool) []string {
	env := append(os.Environ(),
		"LOCKSMITH_KEY="+lk.Key(),
		"LOCKSMITH_TOKEN="+lk.Token(),
	)
	if fence {
		env = append(env, "LOCKSMITH_FENCE="+strconv.FormatInt(lk.Fence(), 10))
	}
	return env
}

// lostText returns why a lock was lost, without the library's prefixes.
func lostText(cause error) string {
	return strings.TrimPrefix(errText(cause), "lock lost: ")
}
