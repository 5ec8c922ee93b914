//go:build linux

package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
)

// Helper processes are this test binary, started again with helperEnv set
// to a helperConfig in JSON: TestMain then runs runHelper instead of the
// tests. A helper reports on its standard output, one helperMsg a line:
// the operations it records, on the test's clock, and events. It stops
// when its standard input is closed.
const helperEnv = "LOCKSMITH_FAULTS_HELPER"

// Helper modes.
const (
	// modeHold obtains Key (or with a Limit, one of the permits of the
	// semaphore Key, or with RW, the read or write hold of the read-write
	// lock Key) with a lease, reports "ready", and holds the lock
	// until stopped (or killed).
	modeHold = "hold"
	// modeWriter obtains Key (or a permit, as modeHold) with a lease, then
	// writes to the store with its fence every few milliseconds, paying
	// no attention to its lease, as work paused between its last look at
	// the lease and its write would; it reports "ready" after its first
	// write, and stops After writes after its lease ended. It writes to
	// the record Key, or to Record when set (the job a permit's holder
	// claimed).
	modeWriter = "writer"
	// modeSoak runs runWorker with Worker until stopped.
	modeSoak = "soak"
	// modeCandidate campaigns in the election Key (see runCandidate):
	// while it leads, it writes to the store with its term's fence.
	modeCandidate = "candidate"
)

type helperConfig struct {
	Mode   string        `json:"mode"`
	Redis  string        `json:"redis"`
	Store  string        `json:"store,omitempty"`
	Clock  int64         `json:"clock"`
	Name   string        `json:"name"`
	Key    string        `json:"key,omitempty"`
	TTL    time.Duration `json:"ttl,omitempty"`
	Limit  int           `json:"limit,omitempty"`  // > 0: Key is a semaphore with Limit permits
	RW     string        `json:"rw,omitempty"`     // faults.AccessRead or AccessWrite: Key is a read-write lock, held so
	Record string        `json:"record,omitempty"` // modeWriter: the record to write
	After  int           `json:"after,omitempty"`
	Worker workerConfig  `json:"worker"`
	// modeCandidate: campaign through Election.Run rather than Campaign
	// and Resign, with Retry as the campaign's retry delay (0: the
	// election's default).
	Run   bool          `json:"run,omitempty"`
	Retry time.Duration `json:"retry,omitempty"`
}

type helperMsg struct {
	Op     *faults.Op `json:"op,omitempty"`
	Event  string     `json:"event,omitempty"`
	Detail string     `json:"detail,omitempty"`
	Token  string     `json:"token,omitempty"` // "ready": the token of what the helper holds
}

// msgWriter sends helperMsgs to the test process; it is the helper's
// Recorder.
type msgWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *msgWriter) send(m helperMsg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(m)
}

func (w *msgWriter) Record(op faults.Op) { w.send(helperMsg{Op: &op}) }

func (w *msgWriter) event(name, detail string) { w.send(helperMsg{Event: name, Detail: detail}) }

// ready reports that the helper holds h: its fence, and its token.
func (w *msgWriter) ready(h *holding) {
	w.send(helperMsg{Event: "ready", Detail: fmt.Sprint(h.lk.Fence()), Token: h.lk.Token()})
}

// runHelper is the whole life of a helper process; it returns its exit
// status.
func runHelper(cfgJSON string) int {
	var cfg helperConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "helper: bad config: %v\n", err)
		return 2
	}
	redis.SetLogger(quietLogger{})
	out := &msgWriter{enc: json.NewEncoder(os.Stdout)}
	clock := faults.ClockFrom(cfg.Clock)
	tr := &tracker{rec: out, clock: clock, name: cfg.Name}

	// The test stops a helper by closing its standard input.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	fail := func(format string, args ...any) int {
		out.event("error", fmt.Sprintf(format, args...))
		return 1
	}
	client := redis.NewClient(&redis.Options{Addr: cfg.Redis, Protocol: 2})
	defer client.Close()
	l := locksmith.New(client, locksmith.WithFencing())
	defer l.Close()
	// take obtains the lock, a permit of the semaphore, or a hold of the
	// read-write lock.
	take := func() (*holding, error) {
		if cfg.RW != "" {
			return tr.obtainRW(ctx, l.RWMutex(cfg.Key), cfg.RW, locksmith.WithTTL(cfg.TTL))
		}
		if cfg.Limit > 0 {
			return tr.acquire(ctx, l.Semaphore(cfg.Key, cfg.Limit), locksmith.WithTTL(cfg.TTL))
		}
		return tr.obtain(ctx, l, cfg.Key, locksmith.WithTTL(cfg.TTL))
	}
	switch cfg.Mode {
	case modeHold:
		h, err := take()
		if err != nil {
			return fail("obtain: %v", err)
		}
		h.lease(ctx)
		out.ready(h)
		<-ctx.Done()
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tr.release(rctx, h)
		return 0

	case modeWriter:
		store, err := faults.DialStore(cfg.Store)
		if err != nil {
			return fail("store: %v", err)
		}
		defer store.Close()
		h, err := take()
		if err != nil {
			return fail("obtain: %v", err)
		}
		lctx := h.lease(ctx)
		write := func() (bool, error) {
			if cfg.Record != "" {
				return h.writeRecord(store, cfg.Record)
			}
			return h.write(store)
		}
		giveUp := time.Now().Add(20 * time.Second)
		ready := false
		for after := 0; after <= cfg.After; {
			if lctx.Err() != nil {
				after++
			}
			if _, err := write(); err != nil {
				return fail("write: %v", err)
			}
			if !ready {
				out.ready(h)
				ready = true
			}
			if time.Now().After(giveUp) {
				return fail("the lease never ended")
			}
			time.Sleep(10 * time.Millisecond)
		}
		h.end(time.Now(), "stopped")
		_, cause := h.leaseEnd()
		out.event("done", fmt.Sprint(cause))
		if !errors.Is(cause, locksmith.ErrLockLost) {
			return fail("lease ended with %v, not ErrLockLost", cause)
		}
		return 0

	case modeCandidate:
		store, err := faults.DialStore(cfg.Store)
		if err != nil {
			return fail("store: %v", err)
		}
		defer store.Close()
		if err := runCandidate(ctx, cfg, l, tr, out, store); err != nil {
			return fail("%v", err)
		}
		return 0

	case modeSoak:
		store, err := faults.DialStore(cfg.Store)
		if err != nil {
			return fail("store: %v", err)
		}
		defer store.Close()
		wc := workerClient(cfg.Worker)
		defer wc.Close()
		n := runWorker(ctx, cfg.Worker, wc, out, clock, store)
		out.event("done", fmt.Sprint(n))
		return 0
	}
	return fail("unknown mode %q", cfg.Mode)
}

// A helperProc is a running helper process, seen from the test.
type helperProc struct {
	t      *testing.T
	cfg    helperConfig
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer // read only after exit

	events chan helperMsg
	exited chan struct{} // closed when the process has exited and its output is read
	err    error         // the exit status, once exited is closed
}

// startHelper starts a helper with cfg, recording its operations to r.
// The helper is killed when t ends, if it still runs.
func startHelper(t *testing.T, r *run, cfg helperConfig) *helperProc {
	t.Helper()
	cfg.Clock = r.clock.Base()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &helperProc{t: t, cfg: cfg, events: make(chan helperMsg, 64), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), helperEnv+"="+string(js))
	p.cmd.Stderr = &p.stderr
	// The helper dies with the test binary.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m helperMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				continue // not ours: the testing package's own output
			}
			if m.Op != nil {
				r.hist.Record(*m.Op)
				continue
			}
			select {
			case p.events <- m:
			default: // nobody waits for so many events
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// await waits up to d for the helper's next event and fails the test
// unless it is want.
func (p *helperProc) await(want string, d time.Duration) helperMsg {
	p.t.Helper()
	select {
	case m := <-p.events:
		if m.Event != want {
			p.t.Fatalf("helper: got event %q (%s), want %q", m.Event, m.Detail, want)
		}
		return m
	case <-p.exited:
		p.t.Fatalf("helper exited (%v) before %q; stderr:\n%s", p.err, want, p.stderr.String())
	case <-time.After(d):
		p.t.Fatalf("helper: no %q within %v", want, d)
	}
	return helperMsg{}
}

// signal sends sig to the helper.
func (p *helperProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to helper: %v", sig, err)
	}
}

// kill SIGKILLs a helper that holds its Key (a lock, or a permit of its
// semaphore) with fence, checks that it died of this signal, and records
// the fault and the end of its holding window in r: a dead process
// believes nothing. It returns when it sent the signal.
func (p *helperProc) kill(r *run, fence int64) time.Time {
	p.t.Helper()
	killed := time.Now()
	p.signal(syscall.SIGKILL)
	// wait errs too when the helper failed on its own, or ran on until
	// wait killed it: check that it died of this SIGKILL.
	var exit *exec.ExitError
	if err := p.wait(5 * time.Second); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		p.t.Fatalf("the helper did not die of SIGKILL: %v", err)
	}
	r.faultSpan("kill-holder", killed, killed, false)
	name := p.cfg.Name
	obtained := r.firstOp(p.t, func(op faults.Op) bool {
		return op.Kind == faults.KindObtain && op.Holder == name && op.Outcome == faults.OutcomeOK && op.Fence == fence
	})
	r.hist.Record(faults.Op{Kind: faults.KindHold, Key: p.cfg.Key, Limit: p.cfg.Limit, Access: p.cfg.RW, Holder: name, Fence: fence,
		ObtainCall: obtained.Call, Call: obtained.Return, Return: r.clock.At(killed), Outcome: "killed"})
	return killed
}

// stop asks the helper to stop, by closing its standard input.
func (p *helperProc) stop() { _ = p.stdin.Close() }

// wait waits up to d for the helper to exit and returns its exit status.
func (p *helperProc) wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("%w; stderr:\n%s", p.err, p.stderr.String())
		}
		return nil
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("helper still running after %v: killed; stderr:\n%s", d, p.stderr.String())
	}
}
