//go:build linux

package faults_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
	"github.com/locksmith-go/locksmith/internal/leakcheck"
)

var (
	soakFor   = flag.Duration("soak", 20*time.Second, "how long TestSoak runs")
	soakSeed  = flag.Uint64("seed", 0, "seed of TestSoak's random choices (0: pick one and print it)")
	histories = flag.String("histories", "", "directory for the histories of failed checks (default: a new temporary directory)")
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		// This process is a helper started by a test: see process_test.go.
		os.Exit(runHelper(cfg))
	}
	// go-redis logs every failed dial and dropped connection; the faults
	// cause many on purpose.
	redis.SetLogger(quietLogger{})
	os.Exit(leakcheck.After(m.Run()))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// A run is the equipment of one fault run: a history on a common clock,
// and a fenced store that records its writes to it.
type run struct {
	clock faults.Clock
	hist  *faults.History
	store *faults.Store
}

func newRun() *run {
	clock := faults.NewClock()
	hist := new(faults.History)
	return &run{clock: clock, hist: hist, store: faults.NewStore(clock, hist)}
}

func (r *run) tracker(name string) *tracker {
	return &tracker{rec: r.hist, clock: r.clock, name: name}
}

// faultSpan records a fault from start to end.
func (r *run) faultSpan(kind string, start, end time.Time, losesData bool) {
	r.hist.Record(faults.Op{Kind: faults.KindFault, Detail: kind,
		Call: r.clock.At(start), Return: r.clock.At(end), LosesData: losesData})
}

// firstOp returns the first recorded op matching f.
func (r *run) firstOp(t *testing.T, f func(faults.Op) bool) faults.Op {
	t.Helper()
	for _, op := range r.hist.Ops() {
		if f(op) {
			return op
		}
	}
	t.Fatal("no such operation recorded")
	return faults.Op{}
}

// check checks the run's history, failing t on any violation, and
// returns the report. On failure the history is kept, with porcupine's
// visualisation, and its path is printed.
func (r *run) check(t *testing.T) *faults.Report {
	t.Helper()
	return r.checkOps(t, r.hist.Ops())
}

// checkOps is check, of ops, a part of the run's history; on failure the
// whole history is kept.
func (r *run) checkOps(t *testing.T, ops []faults.Op) *faults.Report {
	t.Helper()
	rep := faults.CheckOps(ops)
	if err := rep.Err(); err != nil {
		t.Errorf("history check failed: %v\n%s\n%s", err, rep.Summary(), saveHistory(t, r.hist, rep))
	}
	return rep
}

// saveHistory writes a history and its visualisation to the -histories
// directory (or a new temporary one) and returns lines naming them.
func saveHistory(t *testing.T, h *faults.History, rep *faults.Report) string {
	t.Helper()
	dir := *histories
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "locksmith-faults-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Sprintf("cannot save the history: %v", err)
	}
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	var notes []string
	if err := h.WriteJSON(base + ".jsonl"); err != nil {
		notes = append(notes, fmt.Sprintf("history not written: %v", err))
	} else {
		notes = append(notes, "history: "+base+".jsonl")
	}
	if err := rep.Visualize(base + ".html"); err != nil {
		notes = append(notes, fmt.Sprintf("visualisation not written: %v", err))
	} else {
		notes = append(notes, "visualisation: "+base+".html")
	}
	return strings.Join(notes, "\n")
}

// newClient returns a client of the Redis at addr (a server's or a
// proxy's), closed when t ends.
func newClient(t *testing.T, addr string, tune ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: addr, Protocol: 2}
	for _, f := range tune {
		f(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newProxy starts a proxy to target, closed when t ends.
func newProxy(t *testing.T, target string) *faults.Proxy {
	t.Helper()
	p, err := faults.NewProxy(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// fencedLocker returns a Locker on its own client of addr that takes
// fencing tokens, with the TTL and further options, as the scenarios'
// holders use.
func fencedLocker(t *testing.T, addr string, ttl time.Duration, opts ...locksmith.Option) *locksmith.Locker {
	t.Helper()
	return newLocker(t, newClient(t, addr), append([]locksmith.Option{locksmith.WithFencing(), locksmith.WithTTL(ttl)}, opts...)...)
}

// newLocker is locksmith.New, with the Locker closed when t ends.
func newLocker(t *testing.T, client redis.UniversalClient, opts ...locksmith.Option) *locksmith.Locker {
	l := locksmith.New(client, opts...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// outcome classifies the result of Obtain.
func outcome(err error) string {
	switch {
	case err == nil:
		return faults.OutcomeOK
	case errors.Is(err, locksmith.ErrLockLost):
		return faults.OutcomeLost
	case errors.Is(err, locksmith.ErrNotObtained):
		return faults.OutcomeNotObtained
	case errors.Is(err, locksmith.ErrNotHeld):
		return faults.OutcomeNotHeld
	}
	return faults.OutcomeError
}

// waitDone waits up to d for ctx to be done and reports whether it was.
func waitDone(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}
