package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// The interval of status --watch: how often it reads the key.
const (
	defaultWatchInterval = time.Second
	minWatchInterval     = 100 * time.Millisecond
)

// statusFlags are the flags of the status command.
type statusFlags struct {
	connFlags
	json  bool
	watch bool
	// showToken prints holders' tokens, not only their marks.
	showToken bool
	interval  time.Duration
	// intervalSet is true when --interval was given.
	intervalSet bool
}

func statusFlagSet(f *statusFlags) *flag.FlagSet {
	set := newFlagSet("status")
	f.connFlags.register(set)
	set.BoolVar(&f.json, "json", false, "print one JSON object rather than text (with --watch, one a line)")
	set.BoolVar(&f.showToken, "show-token", false,
		"print each holder's token, which can renew or release its lock (by default only a short mark of it, to tell holders apart)")
	set.BoolVar(&f.watch, "watch", false,
		"follow KEY: print its state, then a line each time it changes, until SIGINT, SIGTERM, SIGHUP or SIGQUIT")
	set.DurationVar(&f.interval, "interval", defaultWatchInterval,
		fmt.Sprintf("with --watch, read KEY every `DURATION` (at least %v)", minWatchInterval))
	return set
}

func (f *statusFlags) check() error {
	if err := f.connFlags.check(); err != nil {
		return err
	}
	switch {
	case f.intervalSet && !f.watch:
		return errors.New("--interval needs --watch")
	case f.interval < minWatchInterval:
		return fmt.Errorf("--interval %v is under %v", f.interval, minWatchInterval)
	}
	return nil
}

// status implements "locksmith status".
func (u *ui) status(args []string) int {
	var f statusFlags
	set := statusFlagSet(&f)
	if code, ok := u.parseFlags(set, "status", args); !ok {
		return code
	}
	set.Visit(func(fl *flag.Flag) { f.intervalSet = f.intervalSet || fl.Name == "interval" })
	if err := f.check(); err != nil {
		return u.usageError("status", err)
	}
	if set.NArg() > 0 {
		return u.usageError("status", fmt.Errorf("unexpected argument %q", set.Arg(0)))
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("status", err)
	}
	defer client.Close()

	locker := locksmith.New(client, locksmith.WithPrefix(f.prefix))
	defer locker.Close()
	if f.watch {
		ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
		defer stop()
		w := &keyWatch{ui: u, flags: &f, addr: addr, client: client, locker: locker}
		return w.run(ctx)
	}
	st, err := readState(context.Background(), locker, f.prefix, f.key)
	if err != nil {
		u.errorf("cannot read lock %q from Redis at %s: %s", f.key, addr, errText(err))
		return exitRedis
	}
	u.printState(st, &f, time.Time{})
	return exitOK
}

// A keyState is what Redis holds at a key, as status reads it: a lock, a
// semaphore or a read-write lock.
type keyState interface {
	// describe returns the state in words, for a person; now is the time
	// to tell ages by.
	describe(now time.Time) string
	// fingerprint returns what status --watch compares to tell a change:
	// everything but the times left, which every renewal changes.
	fingerprint() string
	// at returns the state with its time set to t, for status --watch.
	at(t time.Time) keyState
	// withoutTokens returns the state without its holders' tokens, with
	// only their marks (see tokenMark).
	withoutTokens() keyState
}

// readState reads the state of key under prefix: a lock's or, if the key
// holds a sorted set, a read-write lock's or a semaphore's.
func readState(ctx context.Context, locker *locksmith.Locker, prefix, key string) (keyState, error) {
	s, err := locker.Inspect(ctx, key)
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		// Not a lock's string: a sorted set, of a read-write lock or of a
		// semaphore (run --limit)? Each Inspect refuses the other's with
		// ErrWrongKind, and what is no sorted set with WRONGTYPE; any
		// other failure is a failure to read.
		rs, rerr := locker.RWMutex(key).Inspect(ctx)
		if rerr == nil {
			return newRWState(prefix, key, rs), nil
		}
		if !errors.Is(rerr, locksmith.ErrWrongKind) {
			return nil, rerr
		}
		ss, serr := locker.Semaphore(key, 1).Inspect(ctx)
		if serr != nil {
			return nil, serr
		}
		return newSemaphoreState(prefix, key, ss), nil
	}
	if err != nil {
		return nil, err
	}
	return newLockState(prefix, key, s), nil
}

// printState prints st to stdout: as text, or as one JSON object (as f
// says), with its holders' tokens only when f asks for them. A non-zero t
// is the time of a line of status --watch: it starts the text line, which
// is then st on one line, and is the time field of the object.
func (u *ui) printState(st keyState, f *statusFlags, t time.Time) {
	if !f.showToken {
		st = st.withoutTokens()
	}
	if f.json {
		if !t.IsZero() {
			st = st.at(t)
		}
		out, err := json.Marshal(st)
		if err != nil {
			panic(err) // the states always marshal
		}
		fmt.Fprintf(u.stdout, "%s\n", out)
		return
	}
	if t.IsZero() {
		fmt.Fprintln(u.stdout, st.describe(time.Now()))
		return
	}
	fmt.Fprintf(u.stdout, "%s %s\n", t.Format(watchTimeFormat), oneLine(st.describe(t)))
}

// watchTimeFormat is how status --watch prints the time of a change.
const watchTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// oneLine joins the lines of a description into one.
func oneLine(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(strings.TrimSpace(l), ":")
	}
	return strings.Join(lines, "; ")
}

// keyWatch is status --watch: it follows one key.
type keyWatch struct {
	*ui
	flags  *statusFlags
	addr   string // the Redis server's address, for messages
	client redis.UniversalClient
	locker *locksmith.Locker
}

// run prints the key's state, then the state each time it changes, until
// ctx ends, and returns the exit status: exitOK then, or exitRedis if the
// first read fails. Later failures are reported once each, and it keeps
// reading; when Redis answers again it says so and prints the state.
func (w *keyWatch) run(ctx context.Context) int {
	st, err := readState(ctx, w.locker, w.flags.prefix, w.flags.key)
	switch {
	case ctx.Err() != nil:
		return exitOK
	case err != nil:
		w.errorf("cannot read lock %q from Redis at %s: %s", w.flags.key, w.addr, errText(err))
		return exitRedis
	}
	var wake <-chan *redis.Message
	if _, semaphore := st.(semaphoreState); !semaphore {
		// A semaphore's status counts the connections subscribed to its
		// channel as waiters: this one would count. It is only polled.
		announced, err := w.listen(ctx)
		if err != nil {
			return w.usageError("status", errors.New(errText(err)))
		}
		defer announced.Close()
		wake = announced.Channel()
	}
	ticker := time.NewTicker(w.flags.interval)
	defer ticker.Stop()
	w.printState(st, w.flags, time.Now())
	last, failing := st.fingerprint(), false
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-ticker.C:
		case <-wake:
		}
		st, err := readState(ctx, w.locker, w.flags.prefix, w.flags.key)
		switch {
		case ctx.Err() != nil:
			return exitOK
		case err != nil:
			if !failing {
				failing = true
				w.errorf("cannot read lock %q from Redis at %s, trying again every %v: %s",
					w.flags.key, w.addr, w.flags.interval, errText(err))
			}
			continue
		case failing:
			failing = false
			w.errorf("Redis at %s answers again", w.addr)
			last = "" // what changed meanwhile is not known: print the state
		}
		if fp := st.fingerprint(); fp != last {
			w.printState(st, w.flags, time.Now())
			last = fp
		}
	}
}

// listen subscribes to the channel on which the library announces every
// release and handoff of the key (a lock's, or a read-write lock's; see
// Keys.Channel), so that the watch reads the key
// as soon as one is announced rather than at the next --interval. (A
// lock taken while free is not announced: the next read sees it.) It
// subscribes with SSUBSCRIBE on Redis Cluster, where the library
// announces with SPUBLISH. The subscription reconnects by itself after
// a failure; the caller must close it. It fails only for a key that is
// refused.
func (w *keyWatch) listen(ctx context.Context) (*redis.PubSub, error) {
	keys, err := w.locker.Keys(w.flags.key)
	if err != nil {
		return nil, err
	}
	if _, sharded := w.client.(*redis.ClusterClient); sharded {
		return w.client.SSubscribe(ctx, keys.Channel), nil
	}
	return w.client.Subscribe(ctx, keys.Channel), nil
}
