package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/locksmith-go/locksmith"
)

// Defaults of the run command's flags.
const (
	defaultTTL   = 30 * time.Second
	defaultGrace = 10 * time.Second
)

// waitBackoff is how run --wait retries while the lock is held. The
// library hands the lock to (or wakes) a waiting Obtain as soon as the
// holder releases it, and tries again when the holder's TTL runs out, so
// a holder that crashed is replaced at once; the delays matter only while
// it cannot hear of releases (its subscription is being set up, or Redis
// is reconnecting).
var waitBackoff = locksmith.ExponentialBackoff(25*time.Millisecond, time.Second)

// waitUntil is the retry strategy of run --wait: waitBackoff until the
// deadline. The wait ends through the strategy rather than a context
// deadline so that no attempt is cut short: when the wait ends, the lock
// was last found held; when Redis cannot be reached, Obtain says so, even
// if the deadline passes meanwhile.
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

// runFlags are the flags of the run command.
type runFlags struct {
	connFlags
	ttl     time.Duration
	wait    time.Duration // zero: try once
	grace   time.Duration
	maxHold time.Duration // zero: no limit
	skipOK  bool
	fencing bool
	once    bool
	limit   int // zero: a lock; otherwise a semaphore with this many permits
	doneTTL time.Duration
	// doneTTLSet is true when --done-ttl was given.
	doneTTLSet bool
	fenceTTL   time.Duration // zero: the counter never expires
	// fenceTTLSet is true when --fence-ttl was given.
	fenceTTLSet bool
	logFormat   string // logText or logJSON
}

func runFlagSet(f *runFlags) *flag.FlagSet {
	set := newFlagSet("run")
	f.connFlags.register(set)
	set.Lookup("key").Usage = "`KEY` naming the lock, without the prefix (required); given more than once, every KEY is taken at once, or none"
	set.DurationVar(&f.ttl, "ttl", defaultTTL, "the lock's time to live: how long it outlives a locksmith that died; renewed every third of it")
	set.DurationVar(&f.wait, "wait", 0, "wait up to `DURATION` for a lock held elsewhere (default: try once)")
	set.DurationVar(&f.grace, "grace", defaultGrace, "when the lock is lost, the time between SIGTERM and SIGKILL")
	set.DurationVar(&f.maxHold, "max-hold", 0, "stop renewing the lock `DURATION` after it was obtained: COMMAND then gets SIGTERM, as when the lock is lost (default: no limit)")
	set.BoolVar(&f.skipOK, "skip-ok", false,
		fmt.Sprintf("exit 0, not %d, when the lock is held elsewhere (and not %d when --once finds the job done)", exitHeld, exitDone))
	set.BoolVar(&f.fencing, "fencing", false, "take a fencing token, larger than any taken before for KEY, and pass it to COMMAND in LOCKSMITH_FENCE")
	set.IntVar(&f.limit, "limit", 0, "hold one of `N` permits of a semaphore named KEY instead of the lock: at most N runs at once (default: a lock)")
	set.BoolVar(&f.once, "once", false,
		fmt.Sprintf("run COMMAND only if no run under KEY has succeeded (else exit %d), and record its success for --done-ttl", exitDone))
	set.DurationVar(&f.doneTTL, "done-ttl", locksmith.DefaultDoneTTL, "with --once, how long a success is recorded: KEY runs again after that")
	set.DurationVar(&f.fenceTTL, "fence-ttl", 0,
		"with --fencing, expire KEY's fence counter `DURATION` after the last token was taken (default: never)")
	registerLogFormat(set, &f.logFormat)
	return set
}

func (f *runFlags) check(command []string) error {
	if err := f.connFlags.checkKeys(); err != nil {
		return err
	}
	switch several := len(f.keys) > 1; {
	case several && f.once:
		return errors.New("--once records the success of one key's job; it cannot be combined with several --key")
	case several && f.limit > 0:
		return errors.New("--limit takes a permit of one key's semaphore; it cannot be combined with several --key")
	case f.ttl <= 0:
		return fmt.Errorf("--ttl %v is not positive", f.ttl)
	case f.wait < 0:
		return fmt.Errorf("--wait %v is negative", f.wait)
	case f.grace < 0:
		return fmt.Errorf("--grace %v is negative", f.grace)
	case f.maxHold < 0:
		return fmt.Errorf("--max-hold %v is negative", f.maxHold)
	case f.limit < 0:
		return fmt.Errorf("--limit %d is negative", f.limit)
	case f.limit > 0 && f.once:
		return errors.New("--once takes the lock; it cannot be combined with --limit")
	case f.doneTTLSet && !f.once:
		return errors.New("--done-ttl needs --once")
	case f.doneTTL < time.Millisecond:
		return fmt.Errorf("--done-ttl %v is under 1ms", f.doneTTL)
	case f.fenceTTLSet && !f.fencing:
		return errors.New("--fence-ttl needs --fencing")
	case f.fenceTTLSet && f.fenceTTL < time.Millisecond:
		return fmt.Errorf("--fence-ttl %v is under 1ms", f.fenceTTL)
	case len(command) == 0:
		return errors.New("no COMMAND given")
	}
	return nil
}

// registerLogFormat registers --log-format, of run and elect.
func registerLogFormat(set *flag.FlagSet, format *string) {
	set.StringVar(format, "log-format", logText,
		"`FORMAT` of what is reported on stderr: text, messages for people, or json, one JSON object a line for each thing done")
}

// run implements "locksmith run".
func (u *ui) run(args []string) (code int) {
	var f runFlags
	set := runFlagSet(&f)
	if code, ok := u.parseFlags(set, "run", args); !ok {
		return code
	}
	keySet := f.set()
	logKey := f.key
	if keySet != nil {
		logKey = "" // the records name the set instead
	}
	if err := u.startLog(f.logFormat, logKey); err != nil {
		return u.usageError("run", err)
	}
	if u.log != nil && keySet != nil {
		u.log = u.log.With(slog.Any("keys", keySet))
	}
	defer func() { u.logExit(code) }()
	set.Visit(func(fl *flag.Flag) {
		f.doneTTLSet = f.doneTTLSet || fl.Name == "done-ttl"
		f.fenceTTLSet = f.fenceTTLSet || fl.Name == "fence-ttl"
	})
	command := set.Args()
	if err := f.check(command); err != nil {
		return u.usageError("run", err)
	}
	// A command that cannot run should not take the lock from one that can.
	path, code := u.lookPath(command[0])
	if code != exitOK {
		return code
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

	opts := []locksmith.Option{locksmith.WithPrefix(f.prefix), locksmith.WithTTL(f.ttl), locksmith.WithDoneTTL(f.doneTTL),
		locksmith.WithMaxHold(f.maxHold)}
	if f.fencing {
		opts = append(opts, locksmith.WithFencing())
	}
	if f.fenceTTLSet {
		opts = append(opts, locksmith.WithFenceTTL(f.fenceTTL))
	}
	var events *libraryEvents
	if u.log != nil {
		events = newLibraryEvents(u)
		opts = append(opts, locksmith.WithObserver(events), locksmith.WithTracer(events))
	}
	r := &runner{
		supervisor: supervisor{ui: u, command: command, path: path, grace: f.grace, sigs: sigs,
			lostEvent: "lost", events: events},
		flags:  &f,
		addr:   addr,
		locker: locksmith.New(client, opts...),
	}
	defer r.locker.Close()
	return r.run()
}

// set returns the keys of a set of locks, sorted, when --key was given
// more than once, and nil otherwise.
func (f *runFlags) set() []string {
	if len(f.keys) < 2 {
		return nil
	}
	return slices.Sorted(slices.Values(f.keys))
}

// A runner runs one COMMAND under one lock, or a set of locks.
type runner struct {
	supervisor
	flags  *runFlags
	addr   string // the Redis server's address, for messages
	locker *locksmith.Locker
}

// errCommandFailed is what the job gives the library when COMMAND did not
// exit 0 (or did not run), so that Once records no completion.
var errCommandFailed = errors.New("command failed")

// run obtains the lock, runs COMMAND under a lease and releases the lock,
// with WithLock, or with Once for --once, and returns the exit status.
func (r *runner) run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupt := r.interruptOnSignal(cancel)
	start := time.Now()
	var opts []locksmith.Option
	if r.flags.wait > 0 {
		opts = append(opts, locksmith.WithRetry(waitUntil(time.Now().Add(r.flags.wait))))
	}

	var (
		called bool    // the library called job: the lock was obtained
		o      outcome // how supervise ended, once called
		lost   error   // why the lock was lost while COMMAND ran, if it was
	)
	job := func(lease context.Context) error {
		called = true
		if sig := interrupt.stop(); sig != nil {
			o = outcome{status: r.interrupted(sig)}
			return errCommandFailed
		}
		lk := locksmith.LockFromContext(lease)
		if r.events != nil {
			attrs := r.events.obtainAttrs(start, r.flags.ttl, lk.Fence(), r.flags.fencing)
			if r.flags.fencing && r.flags.set() != nil {
				attrs = append(attrs, slog.Any("fences", fencesOf(lk)))
			}
			r.report(slog.LevelInfo, "acquired", "", attrs...)
		}
		o = r.supervise(r.what(), r.childEnv(lk), lease)
		// Read before the lease ends with the release.
		if cause := context.Cause(lease); errors.Is(cause, locksmith.ErrLockLost) {
			lost = cause
		}
		if o.status != exitOK {
			return errCommandFailed
		}
		return nil
	}
	var err error
	switch {
	case r.flags.once:
		_, err = r.locker.Once(ctx, r.flags.key, job, opts...)
	case r.flags.limit > 0:
		err = r.locker.Semaphore(r.flags.key, r.flags.limit).WithPermit(ctx, job, opts...)
	case r.flags.set() != nil:
		err = r.locker.WithLocks(ctx, r.flags.set(), job, opts...)
	default:
		err = r.locker.WithLock(ctx, r.flags.key, job, opts...)
	}
	sig := interrupt.stop()
	if !called {
		return r.notRun(err, sig, start)
	}
	if r.events != nil {
		// Close delivers the release's event, and the others still
		// buffered, before the records below; nothing is held any more.
		_ = r.locker.Close()
	}

	switch endErr := withoutErr(err, errCommandFailed); {
	case !o.ran || o.stopped:
		return o.status // reported already
	case lost != nil:
		r.report(slog.LevelError, "lost", fmt.Sprintf("lost %s just before %q exited with status %d (%s)%s",
			r.what(), r.command[0], o.status, lostText(lost), r.notRecorded(o)),
			slog.String("cause", lostText(lost)), slog.Bool("child_started", true))
		return exitLost
	case errors.Is(err, locksmith.ErrLockLost):
		// The release found the lock gone, and its record says so.
		r.report(slog.LevelError, "lost", fmt.Sprintf("%s expired or was taken before %q exited with status %d; another run may have overlapped%s",
			r.what(), r.command[0], o.status, r.notRecorded(o)),
			slog.String("cause", "expired or taken before COMMAND exited"), slog.Bool("child_started", true))
		return exitLost
	case endErr != nil && r.flags.once && o.status == exitOK:
		r.errorf("could not record that %q succeeded under %q (if it was not recorded, the next run --once runs it again; "+
			"the lock expires within %v): %s", r.command[0], r.flags.key, r.flags.ttl, errText(endErr))
	case endErr != nil:
		// The release_failed record says so in JSON.
		r.report(slog.LevelWarn, "", fmt.Sprintf("could not release %s (it expires within %v): %s", r.what(), r.flags.ttl, errText(endErr)))
	}
	return o.status
}

// notRun reports why the library returned err without running COMMAND, and
// returns the exit status. sig is the signal that interrupted the wait for
// the lock, if one did; start is when the wait began.
func (r *runner) notRun(err error, sig os.Signal, start time.Time) int {
	switch {
	case sig != nil:
		return r.interrupted(sig)
	case err == nil:
		// Only Once returns nil without calling the job: it is done.
		r.report(slog.LevelInfo, "skipped", fmt.Sprintf("%s; not running %q", r.doneText(), r.command[0]),
			slog.String("reason", "done"))
		return r.skipped(exitDone)
	case errors.Is(err, locksmith.ErrNotObtained):
		var text string
		if r.flags.wait > 0 {
			text = fmt.Sprintf("%s still held elsewhere after waiting %v; not running %q", r.heldText(), r.flags.wait, r.command[0])
		} else {
			text = fmt.Sprintf("%s held elsewhere; not running %q", r.heldText(), r.command[0])
		}
		r.report(slog.LevelInfo, "skipped", text, slog.String("reason", "held"), millis("waited_ms", time.Since(start)))
		return r.skipped(exitHeld)
	case errors.Is(err, locksmith.ErrInvalidArgument):
		return r.usageError("run", errors.New(errText(err)))
	default:
		// Nobody knows whether the lock is free: fail closed.
		r.errorf("cannot obtain %s from Redis at %s, not running %q: %s", r.what(), r.addr, r.command[0], errText(err))
		return exitRedis
	}
}
