package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/locksmith-go/locksmith"
)

// Defaults of the run command's flags.
const (
	defaultTTL   = 30 * time.Second
	defaultGrace = 10 * time.Second
)

// waitBackoff is how run --wait retries while the lock is held. Obtain also
// tries again as soon as the holder's TTL runs out, so a holder that
// crashed is replaced at once; one that releases is noticed within the
// maximum delay.
var waitBackoff = locksmith.ExponentialBackoff(25*time.Millisecond, time.Second)

// waitUntil is the retry strategy of run --wait: waitBackoff until the
// deadline. The wait ends through the strategy rather than a context
// deadline so that every attempt runs to completion: when the wait ends,
// the last attempt found the lock held; when Redis cannot be reached,
// Obtain says so, even if the deadline passes meanwhile.
type waitUntil time.Time

func (w waitUntil) NewBackoff() locksmith.Backoff {
	return &waitState{b: waitBackoff.NewBackoff(), deadline: time.Time(w)}
}

type waitState struct {
	b        locksmith.Backoff
	deadline time.Time
}

func (w *waitState) Next() (time.Duration, bool) {
	left := time.Until(w.deadline)
	if left <= 0 {
		return 0, false
	}
	d, ok := w.b.Next()
	return min(d, left), ok
}

// maxReleaseWait bounds the release at the end of a run.
const maxReleaseWait = 5 * time.Second

// runFlags are the flags of the run command.
type runFlags struct {
	connFlags
	ttl    time.Duration
	wait   time.Duration // zero: try once
	grace  time.Duration
	skipOK bool
	// Planned: --once, run at most once per key (with the library's Once),
	// and --fencing, which passes LOCKSMITH_FENCE to COMMAND.
}

func runFlagSet(f *runFlags) *flag.FlagSet {
	set := newFlagSet("run")
	f.connFlags.register(set)
	set.DurationVar(&f.ttl, "ttl", defaultTTL, "the lock's time to live: how long it outlives a locksmith that died; renewed every third of it")
	set.DurationVar(&f.wait, "wait", 0, "wait up to `DURATION` for a lock held elsewhere (default: try once)")
	set.DurationVar(&f.grace, "grace", defaultGrace, "when the lock is lost, the time between SIGTERM and SIGKILL")
	set.BoolVar(&f.skipOK, "skip-ok", false, fmt.Sprintf("exit 0, not %d, when the lock is held elsewhere", exitHeld))
	return set
}

func (f *runFlags) check(command []string) error {
	if err := f.connFlags.check(); err != nil {
		return err
	}
	switch {
	case f.ttl <= 0:
		return fmt.Errorf("--ttl %v is not positive", f.ttl)
	case f.wait < 0:
		return fmt.Errorf("--wait %v is negative", f.wait)
	case f.grace < 0:
		return fmt.Errorf("--grace %v is negative", f.grace)
	case len(command) == 0:
		return errors.New("no COMMAND given")
	}
	return nil
}

// run implements "locksmith run".
func (u *ui) run(args []string) int {
	var f runFlags
	set := runFlagSet(&f)
	if code, ok := u.parseFlags(set, "run", args); !ok {
		return code
	}
	command := set.Args()
	if err := f.check(command); err != nil {
		return u.usageError("run", err)
	}
	// A command that cannot run should not take the lock from one that can.
	path, err := exec.LookPath(command[0])
	if err != nil {
		u.errorf("cannot run %q: %v", command[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("run", err)
	}
	defer client.Close()

	// Signals are caught from here on, so that none ends locksmith while it
	// holds the lock: they interrupt a wait, or go to COMMAND.
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	r := &runner{
		ui:      u,
		flags:   &f,
		command: command,
		path:    path,
		addr:    addr,
		locker:  locksmith.New(client, locksmith.WithPrefix(f.prefix), locksmith.WithTTL(f.ttl)),
		sigs:    sigs,
	}
	return r.run()
}

// notifySignals relays the forwarded signals to sigs, except those that
// were ignored when locksmith started, which stay ignored (by locksmith and
// by COMMAND).
func notifySignals(sigs chan<- os.Signal) {
	for _, sig := range forwardedSignals {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
}

// A runner runs one COMMAND under one lock.
type runner struct {
	*ui
	flags   *runFlags
	command []string // COMMAND and its arguments
	path    string   // COMMAND found on $PATH
	addr    string   // the Redis server's address, for messages
	locker  *locksmith.Locker
	sigs    <-chan os.Signal
}

// run obtains the lock, runs COMMAND under a lease and releases the lock,
// and returns the exit status.
func (r *runner) run() int {
	lk, code, ok := r.obtain()
	if !ok {
		return code
	}
	// --once will take the place of obtain and Lease: Locker.Once obtains
	// the lock and calls a function that runs r.supervise with
	// LockFromContext(ctx) and its ctx as the lease, and fails unless
	// COMMAND exited 0, so that only a success is recorded.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease := lk.Lease(ctx)

	o := r.supervise(lk, lease)
	// Read before the release, which ends the lease too.
	lostCause := context.Cause(lease)
	relErr := r.releaseLock(lk)
	switch {
	case !o.ran || o.stopped:
		return o.status // reported already
	case lostCause != nil:
		r.errorf("lost lock %q just before %q exited with status %d (%s)",
			r.flags.key, r.command[0], o.status, lostText(lostCause))
		return exitLost
	case errors.Is(relErr, locksmith.ErrNotHeld):
		r.errorf("lock %q expired or was taken before %q exited with status %d; another run may have overlapped",
			r.flags.key, r.command[0], o.status)
		return exitLost
	case relErr != nil:
		r.errorf("could not release lock %q (it expires within %v): %s", r.flags.key, r.flags.ttl, errText(relErr))
	}
	return o.status
}

// obtain obtains the lock, waiting up to --wait for it, and gives up when a
// signal arrives. When it returns false, run must exit with the returned
// status; the lock is not held then.
func (r *runner) obtain() (*locksmith.Lock, int, bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opts []locksmith.Option
	if r.flags.wait > 0 {
		// Release notifications, once the library has them, will wake the
		// wait here sooner than the retry strategy does.
		opts = append(opts, locksmith.WithRetry(waitUntil(time.Now().Add(r.flags.wait))))
	}

	type result struct {
		lk  *locksmith.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		lk, err := r.locker.Obtain(ctx, r.flags.key, opts...)
		done <- result{lk, err}
	}()
	var res result
	select {
	case res = <-done:
	case sig := <-r.sigs:
		cancel()
		if res = <-done; res.lk != nil {
			_ = r.releaseLock(res.lk)
		}
		r.errorf("got signal %q while obtaining lock %q; not running %q", sig, r.flags.key, r.command[0])
		return nil, exitSignal + signalNumber(sig), false
	}

	err := res.err
	switch {
	case err == nil:
		return res.lk, 0, true
	case errors.Is(err, locksmith.ErrNotObtained):
		status := exitHeld
		if r.flags.skipOK {
			status = exitOK
		}
		if r.flags.wait > 0 {
			r.errorf("lock %q is still held elsewhere after waiting %v; not running %q", r.flags.key, r.flags.wait, r.command[0])
		} else {
			r.errorf("lock %q is held elsewhere; not running %q", r.flags.key, r.command[0])
		}
		return nil, status, false
	case errors.Is(err, locksmith.ErrInvalidArgument):
		return nil, r.usageError("run", errors.New(errText(err))), false
	default:
		// Nobody knows whether the lock is free: fail closed.
		r.errorf("cannot obtain lock %q from Redis at %s, not running %q: %s", r.flags.key, r.addr, r.command[0], errText(err))
		return nil, exitRedis, false
	}
}

// An outcome is how supervise ended.
type outcome struct {
	status  int  // run's exit status: COMMAND's own, if nothing went wrong
	ran     bool // COMMAND was started
	stopped bool // COMMAND was stopped because the lock was lost
}

// supervise runs COMMAND and waits for it to exit, passing on the signals
// locksmith receives. If lease ends, the lock is lost: COMMAND's process
// group gets SIGTERM, and SIGKILL if anything in it outlives --grace.
func (r *runner) supervise(lk *locksmith.Lock, lease context.Context) outcome {
	// A signal that came, or a loss that happened, while the lock was
	// obtained stops the run here.
	select {
	case sig := <-r.sigs:
		r.errorf("got signal %q before %q started; not running it", sig, r.command[0])
		return outcome{status: exitSignal + signalNumber(sig)}
	case <-lease.Done():
		r.errorf("lost lock %q before %q started (%s); not running it",
			r.flags.key, r.command[0], lostText(context.Cause(lease)))
		return outcome{status: exitLost}
	default:
	}

	// See sysProcAttr: the parent-death signal follows this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := startChild(r.path, r.command, childEnv(lk))
	if err != nil {
		r.errorf("cannot run %q: %v", r.command[0], err)
		return outcome{status: exitCannotRun}
	}

	var grace *time.Timer // from the SIGTERM sent on loss to the SIGKILL
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	var (
		leaseDone = lease.Done()
		graceDone <-chan time.Time
		stopped   bool
	)
	for {
		select {
		case <-c.exited:
			if !stopped {
				return outcome{status: c.exitStatus(), ran: true}
			}
			r.stopGroup(c, graceDone)
			return outcome{status: exitLost, ran: true, stopped: true}
		case sig := <-r.sigs:
			if s, ok := sig.(syscall.Signal); ok {
				r.kill(c, s)
			}
		case <-leaseDone:
			leaseDone, stopped = nil, true
			r.errorf("lost lock %q while %q ran (%s); sending SIGTERM to its process group (SIGKILL after %v)",
				r.flags.key, r.command[0], lostText(context.Cause(lease)), r.flags.grace)
			r.kill(c, syscall.SIGTERM)
			grace = time.NewTimer(r.flags.grace)
			graceDone = grace.C
		case <-graceDone:
			graceDone = nil
			r.errorf("%q still running %v after SIGTERM; sending SIGKILL", r.command[0], r.flags.grace)
			r.kill(c, syscall.SIGKILL)
		}
	}
}

// stopGroup waits, after COMMAND itself has exited, for the rest of its
// process group to exit, and kills what is left when graceDone fires. A
// nil graceDone means SIGKILL was sent already.
func (r *runner) stopGroup(c *child, graceDone <-chan time.Time) {
	if graceDone == nil {
		return
	}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for c.groupAlive() {
		select {
		case <-graceDone:
			r.errorf("processes started by %q still running %v after SIGTERM; sending SIGKILL", r.command[0], r.flags.grace)
			r.kill(c, syscall.SIGKILL)
			return
		case <-poll.C:
		}
	}
}

func (r *runner) kill(c *child, sig syscall.Signal) {
	if err := c.signalGroup(sig); err != nil {
		r.errorf("cannot send %v to %q: %v", sig, r.command[0], err)
	}
}

// releaseLock releases lk, bounded in time.
func (r *runner) releaseLock(lk *locksmith.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(r.flags.ttl, maxReleaseWait))
	defer cancel()
	return lk.Release(ctx)
}

// childEnv returns COMMAND's environment: locksmith's own, with the lock's
// key (as given, without the prefix) and token.
func childEnv(lk *locksmith.Lock) []string {
	// With --fencing, LOCKSMITH_FENCE joins them.
	return append(os.Environ(),
		"LOCKSMITH_KEY="+lk.Key(),
		"LOCKSMITH_TOKEN="+lk.Token(),
	)
}

// lostText returns why a lock was lost, without the library's prefixes.
func lostText(cause error) string {
	return strings.TrimPrefix(errText(cause), "lock lost: ")
}
