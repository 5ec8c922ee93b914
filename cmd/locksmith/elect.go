package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"

	"github.com/locksmith-go/locksmith"
)

// The pause of elect before it campaigns again: after a term, and after
// a campaign that Redis failed. It doubles, up to electPauseMax, while
// terms are lost, COMMAND fails or Redis does, so that a COMMAND that
// fails at once is not restarted in a tight loop; a COMMAND that exits 0
// sets it back to electPauseMin.
const (
	electPauseMin = 100 * time.Millisecond
	electPauseMax = 5 * time.Second
)

// electFlags are the flags of the elect command.
type electFlags struct {
	connFlags       // key is the election's name, given by --name
	value           string
	ttl             time.Duration
	grace           time.Duration
	maxHold         time.Duration // zero: no limit
	exitWithCommand bool
	observe         bool
	json            bool
	logFormat       string          // logText or logJSON
	given           map[string]bool // the flags given, by name
}

func electFlagSet(f *electFlags) *flag.FlagSet {
	set := newFlagSet("elect")
	set.StringVar(&f.key, "name", "", "`NAME` of the election, without the prefix (required)")
	f.connFlags.registerRedis(set)
	set.StringVar(&f.value, "value", "",
		"`VALUE` that observers see of this candidate while it leads (default HOST:PID: the host's name and locksmith's process id)")
	set.DurationVar(&f.ttl, "ttl", defaultTTL,
		"the leadership's time to live: how soon another candidate takes over from a locksmith that died; renewed every third of it")
	set.DurationVar(&f.grace, "grace", defaultGrace, "when leadership is lost, the time between SIGTERM and SIGKILL")
	set.DurationVar(&f.maxHold, "max-hold", 0,
		"end each term `DURATION` after it began: COMMAND then gets SIGTERM, as when leadership is lost (default: no limit)")
	set.BoolVar(&f.exitWithCommand, "exit-with-command", false,
		"lead once: when COMMAND exits, resign and exit with its status (default: resign and campaign again)")
	set.BoolVar(&f.observe, "observe", false, "run no COMMAND: print the leader and each change of leader, a line each, until interrupted")
	set.BoolVar(&f.json, "json", false, "with --observe, print one JSON object a line rather than text")
	registerLogFormat(set, &f.logFormat)
	return set
}

// campaignFlags are the flags that only a candidate takes, not --observe.
var campaignFlags = []string{"value", "ttl", "grace", "max-hold", "exit-with-command"}

func (f *electFlags) check(command []string) error {
	if f.key == "" {
		return errors.New("--name is required")
	}
	if err := f.connFlags.checkRedis(); err != nil {
		return err
	}
	switch {
	case f.ttl <= 0:
		return fmt.Errorf("--ttl %v is not positive", f.ttl)
	case f.grace < 0:
		return fmt.Errorf("--grace %v is negative", f.grace)
	case f.maxHold < 0:
		return fmt.Errorf("--max-hold %v is negative", f.maxHold)
	case f.json && !f.observe:
		return errors.New("--json needs --observe")
	case f.observe && len(command) > 0:
		return fmt.Errorf("--observe runs no COMMAND, but %q was given", command[0])
	case !f.observe && len(command) == 0:
		return errors.New("no COMMAND given (or --observe, to watch the leader)")
	}
	if f.observe {
		for _, name := range campaignFlags {
			if f.given[name] {
				return fmt.Errorf("--%s is for a candidate; it cannot be combined with --observe", name)
			}
		}
	}
	return nil
}

// elect implements "locksmith elect".
func (u *ui) elect(args []string) (code int) {
	var f electFlags
	set := electFlagSet(&f)
	if code, ok := u.parseFlags(set, "elect", args); !ok {
		return code
	}
	if err := u.startLog(f.logFormat, f.key); err != nil {
		return u.usageError("elect", err)
	}
	defer func() { u.logExit(code) }()
	f.given = make(map[string]bool)
	set.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	command := set.Args()
	if err := f.check(command); err != nil {
		return u.usageError("elect", err)
	}
	if !f.given["value"] {
		f.value = defaultValue()
	}
	var path string
	if !f.observe {
		// A command that cannot run should not take leadership from one
		// that can.
		var code int
		if path, code = u.lookPath(command[0]); code != exitOK {
			return code
		}
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("elect", err)
	}
	defer client.Close()

	// Signals are caught from here on, so that none ends locksmith while
	// it leads: they interrupt a campaign, or go to COMMAND.
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	opts := []locksmith.Option{locksmith.WithPrefix(f.prefix)}
	var events *libraryEvents
	if u.log != nil && !f.observe {
		events = newLibraryEvents(u)
		opts = append(opts, locksmith.WithObserver(events), locksmith.WithTracer(events))
	}
	locker := locksmith.New(client, opts...)
	defer locker.Close()
	el := &elector{
		supervisor: supervisor{ui: u, command: command, path: path, grace: f.grace, sigs: sigs, stops: isStopSignal,
			lostEvent: "term_lost", events: events},
		flags:    &f,
		addr:     addr,
		election: locker.Election(f.key, locksmith.WithTTL(f.ttl), locksmith.WithMaxHold(f.maxHold)),
	}
	if f.observe {
		return el.observe()
	}
	return el.run()
}

// defaultValue returns the value of a candidate without --value:
// "HOST:PID", this host's name and locksmith's process id.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// isStopSignal reports whether sig asks elect to stop: to exit, once
// COMMAND has exited, rather than campaign again.
func isStopSignal(sig os.Signal) bool {
	return slices.Contains(stopSignals, sig)
}

// An elector is one candidate of one election, which runs COMMAND while
// it leads; or, with --observe, an observer of the election.
type elector struct {
	supervisor
	flags    *electFlags
	addr     string // the Redis server's address, for messages
	election *locksmith.Election
}

// what names what a candidate holds, for messages.
func (el *elector) what() string {
	return fmt.Sprintf("leadership of election %q", el.flags.key)
}

// run campaigns, runs COMMAND while leading, resigns when COMMAND exits
// and campaigns again, until a signal stops it or, with
// --exit-with-command, COMMAND exits; it returns the exit status.
func (el *elector) run() int {
	var pause time.Duration // before the next campaign
	for {
		term, code := el.campaign(pause)
		if term == nil {
			return code
		}
		o := el.supervise(el.what(), el.childEnv(term), term.Context())
		// Read before Resign ends the term's context.
		lost := context.Cause(term.Context())
		if !errors.Is(lost, locksmith.ErrLockLost) {
			lost = nil
		}
		// Campaign again unless a signal asked to stop, --exit-with-command
		// says so, or COMMAND could not start (it will not next time).
		again := o.stopSig == nil && !el.flags.exitWithCommand && (o.ran || o.status == exitLost)
		err := el.resign(term)
		switch {
		case errors.Is(err, locksmith.ErrNotHeld) && lost == nil && o.ran:
			// Neither the lease nor COMMAND noticed, but leadership was
			// gone before the resignation.
			el.report(slog.LevelError, "term_lost",
				fmt.Sprintf("%s expired or was taken before %q exited with status %d; another candidate may have led meanwhile",
					el.what(), el.command[0], o.status),
				slog.String("cause", "expired or taken before COMMAND exited"), slog.Bool("child_started", true))
			lost = err
		case lost != nil && o.ran && !o.stopped:
			el.report(slog.LevelError, "term_lost",
				fmt.Sprintf("lost %s just before %q exited with status %d (%s)", el.what(), el.command[0], o.status, lostText(lost)),
				slog.String("cause", lostText(lost)), slog.Bool("child_started", true))
		}
		if !again {
			if lost != nil && o.ran {
				return exitLost
			}
			return o.status
		}
		if lost != nil || o.status != exitOK {
			pause = min(max(2*pause, electPauseMin), electPauseMax)
		} else {
			pause = electPauseMin
		}
		if o.ran && lost == nil {
			el.report(slog.LevelInfo, "campaigning", fmt.Sprintf("%q exited with status %d; resigned from election %q, campaigning again in %v",
				el.command[0], o.status, el.flags.key, pause), millis("pause_ms", pause))
		} else {
			el.report(slog.LevelInfo, "campaigning", fmt.Sprintf("campaigning again in election %q in %v", el.flags.key, pause),
				millis("pause_ms", pause))
		}
	}
}

// childEnv returns COMMAND's environment: locksmith's own, with the
// election's name in LOCKSMITH_KEY, the term's token and fencing token in
// LOCKSMITH_TOKEN and LOCKSMITH_FENCE, and the candidate's value in
// LOCKSMITH_VALUE.
func (el *elector) childEnv(term *locksmith.Term) []string {
	return append(lockEnv(term.Lock, true), "LOCKSMITH_VALUE="+term.Value())
}

// campaign waits for pause, then campaigns until this candidate leads,
// and returns its term. It returns nil and the exit status instead when
// elect must exit: a signal stopped it, or the campaign failed in a way
// that trying again cannot mend (with --exit-with-command, in any way).
// Other failures are reported and tried again after a pause.
func (el *elector) campaign(pause time.Duration) (*locksmith.Term, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupt := el.interruptOnSignal(cancel)
	for {
		var (
			term  *locksmith.Term
			err   = ctx.Err()
			start time.Time
		)
		if err == nil && sleepCtx(ctx, pause) {
			start = time.Now()
			term, err = el.election.Campaign(ctx, el.flags.value)
		}
		fatal := errors.Is(err, locksmith.ErrInvalidArgument) || errors.Is(err, locksmith.ErrNoPermission) ||
			el.flags.exitWithCommand
		if err != nil && !fatal && ctx.Err() == nil {
			pause = min(max(2*pause, electPauseMin), electPauseMax)
			el.report(slog.LevelWarn, "campaign_failed", fmt.Sprintf("cannot campaign in election %q at Redis at %s, trying again in %v: %s",
				el.flags.key, el.addr, pause, errText(err)), slog.String("error", errText(err)), millis("pause_ms", pause))
			continue
		}
		// Only the interrupter ends ctx.
		if sig := interrupt.stop(); sig != nil {
			if term != nil {
				_ = el.resign(term)
			}
			el.report(slog.LevelWarn, "interrupted",
				fmt.Sprintf("got signal %q while campaigning in election %q; not running %q", sig, el.flags.key, el.command[0]),
				slog.String("signal", signalName(sig)))
			return nil, exitSignal + signalNumber(sig)
		}
		switch {
		case err == nil:
			if el.events != nil {
				attrs := append([]slog.Attr{slog.String("value", el.flags.value)},
					el.events.obtainAttrs(start, el.flags.ttl, term.Fence(), true)...)
				el.report(slog.LevelInfo, "elected", "", attrs...)
			}
			return term, exitOK
		case errors.Is(err, locksmith.ErrInvalidArgument):
			return nil, el.usageError("elect", errors.New(errText(err)))
		default:
			el.errorf("cannot campaign in election %q at Redis at %s, not running %q: %s",
				el.flags.key, el.addr, el.command[0], errText(err))
			return nil, exitRedis
		}
	}
}

// sleepCtx waits for d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// resign ends term. When Redis cannot answer, the term is no longer
// renewed (see Term.Resign): another candidate, or this one campaigning
// again, leads within the TTL. It returns nil, an error matching
// ErrNotHeld when leadership had ended already (not reported), or the
// failure, reported.
func (el *elector) resign(term *locksmith.Term) error {
	ctx, cancel := context.WithTimeout(context.Background(), el.flags.timeout)
	defer cancel()
	err := term.Resign(ctx)
	switch {
	case err == nil:
		el.report(slog.LevelInfo, "resigned", "")
	case errors.Is(err, locksmith.ErrNotHeld):
		// Leadership had ended: the term's loss is what the caller, or
		// the lease's watch before it, reports.
	default:
		el.report(slog.LevelWarn, "resign_failed", fmt.Sprintf("could not resign from election %q (another candidate takes over within %v): %s",
			el.flags.key, el.flags.ttl, errText(err)), slog.String("error", errText(err)))
	}
	return err
}

// leaderJSON is a line that elect --observe --json prints.
type leaderJSON struct {
	Name string `json:"name"`
	// Leader is false while nobody leads; the other fields are then
	// absent.
	Leader bool    `json:"leader"`
	Value  *string `json:"value,omitempty"`
	Fence  int64   `json:"fence,omitempty"`
	// TTLMillis is the time the leader's term had left when it was read,
	// in milliseconds; -1 for a lock without expiry (not set by
	// locksmith).
	TTLMillis *int64 `json:"ttl_ms,omitempty"`
}

// observe prints the leader and each change of leader until a signal
// that stops locksmith arrives, and returns the exit status.
func (el *elector) observe() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupt := el.interruptOnSignal(cancel)
	defer interrupt.stop()
	// Observe tries a failed read again quietly: read once first, so that
	// a Redis that cannot answer is reported.
	_, err := el.election.Leader(ctx)
	if err == nil || errors.Is(err, locksmith.ErrNoLeader) {
		var changes <-chan locksmith.Leader
		if changes, err = el.election.Observe(ctx); err == nil {
			for l := range changes {
				el.printLeader(l)
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		return exitOK // interrupted: the observer's way to end
	case errors.Is(err, locksmith.ErrInvalidArgument):
		return el.usageError("elect", errors.New(errText(err)))
	case err == nil:
		err = errors.New("the observer stopped")
	}
	el.errorf("cannot observe election %q at Redis at %s: %s", el.flags.key, el.addr, errText(err))
	return exitRedis
}

// printLeader prints one line about l, the leader (not Elected: nobody).
func (el *elector) printLeader(l locksmith.Leader) {
	if !el.flags.json {
		if !l.Elected {
			fmt.Fprintln(el.stdout, "no leader")
		} else {
			fmt.Fprintf(el.stdout, "leader %q fence %d\n", l.Value, l.Fence)
		}
		return
	}
	line := leaderJSON{Name: el.flags.key, Leader: l.Elected}
	if line.Leader {
		ttl := l.TTL.Milliseconds()
		if l.TTL < 0 {
			ttl = -1
		}
		line.Value, line.Fence, line.TTLMillis = &l.Value, l.Fence, &ttl
	}
	out, err := json.Marshal(line)
	if err != nil {
		panic(err) // leaderJSON always marshals
	}
	fmt.Fprintf(el.stdout, "%s\n", out)
}
