package locksmith

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// The restart guard: how long each master has been up, as the server
// itself tells (INFO server: run_id, uptime_in_seconds), and the rule that
// a master counts only once it has been up for the longest TTL its Locker
// may grant (see NewQuorum and WithRestartGuard). A master that restarted
// without persistence forgot the locks it held; once it has been up for
// that long, every lock it forgot would have expired anyway.
//
// The uptime is read when a connection is made, by the client's OnConnect
// (see uptimeOf), so that a steady-state acquire sends nothing more. The
// ordering that makes this enough: a restart ends every connection to the
// old process, so a command that reaches the new process runs on a
// connection made after it started, and go-redis runs OnConnect on a new
// connection (after its handshake) before it sends any command on it. So
// by the time an acquire's reply arrives from a restarted master, that
// master's reading has been taken, and the guard, which looks again once
// the reply is in (see guard.after), refuses to count it.

// upState is what is known of the process behind one go-redis client: a
// master's address. It is shared by every Locker of that client, fed by
// the client's OnConnect and by reads of the guard's own when it knows
// nothing (see guard.before).
type upState struct {
	addr string // the address the client dials

	mu sync.Mutex // guards the fields below; no I/O is done under it
	// Each reading takes a ticket before it sends INFO. okTicket is the
	// latest ticket of a successful one, failTicket the latest of a
	// reading at connect that failed (whose connection's process is then
	// unknown), with failErr its error. The state is known while
	// okTicket > failTicket: a reading sent after the connection whose
	// reading failed was made is answered by that process or a later one,
	// since one address has one process at a time.
	tickets, okTicket, failTicket uint64
	failErr                       error
	runID                         string
	// upSince is the latest moment, on this process's monotonic clock,
	// at which the server process may have started: the latest over
	// every reading, so that a late reading of an older process never
	// makes a newer one look up for longer (see read).
	upSince time.Time
}

// readServerInfo is what a reading sends INFO on: a connection in
// OnConnect, or a client.
type readServerInfo interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// read sends INFO server on c and keeps what it says. A failure at
// connect (atConnect) makes the state unknown until a later reading
// succeeds; the error is returned either way.
func (u *upState) read(ctx context.Context, c readServerInfo, atConnect bool) error {
	u.mu.Lock()
	u.tickets++
	ticket := u.tickets
	u.mu.Unlock()
	info, err := c.Info(ctx, "server").Result()
	at := time.Now()
	var (
		runID  string
		uptime int64
	)
	if err == nil {
		runID, uptime, err = parseServerInfo(info)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("INFO server on %s: %w", u.addr, err)
		if atConnect && ticket > u.failTicket {
			u.failTicket, u.failErr = ticket, err
		}
		return err
	}
	// uptime_in_seconds is the difference of two whole seconds of the
	// server's clock (now and the start, each rounded down), so the
	// process has been up for more than uptime-1 seconds when it
	// answered, and so before at: it started before at-(uptime-1)s.
	since := at.Add(-time.Duration(uptime-1) * time.Second)
	if u.okTicket == 0 || since.After(u.upSince) {
		u.upSince = since
	}
	u.runID = runID
	u.okTicket = max(u.okTicket, ticket)
	return nil
}

// parseServerInfo reads run_id and uptime_in_seconds from the reply to
// INFO server.
func parseServerInfo(info string) (runID string, uptime int64, err error) {
	uptime = -1
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			if uptime, err = strconv.ParseInt(v, 10, 64); err != nil {
				return "", 0, fmt.Errorf("uptime_in_seconds %q: %w", v, err)
			}
		}
	}
	if runID == "" || uptime < 0 {
		return "", 0, errors.New("no run_id or uptime_in_seconds in its reply")
	}
	return runID, uptime, nil
}

// known reports whether the state tells how long the master has been up.
func (u *upState) known() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.okTicket > u.failTicket
}

// outOfService returns nil when the master has been up for at least
// maxTTL at now, and otherwise why it does not count yet.
func (u *upState) outOfService(now time.Time, maxTTL time.Duration) *RestartError {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.okTicket <= u.failTicket {
		err := u.failErr
		if err == nil {
			err = errors.New("its uptime was never read")
		}
		return &RestartError{Master: u.addr, Err: err}
	}
	up := now.Sub(u.upSince)
	if up >= maxTTL {
		return nil
	}
	return &RestartError{Master: u.addr, RunID: u.runID, Up: max(up, 0), StaysOut: maxTTL - max(up, 0)}
}

// failoverAddr is the Addr go-redis gives the options of a failover
// client (redis.NewFailoverClient).
const failoverAddr = "FailoverClient"

// uptimes holds the upState of every client the guard watches, by the
// client's own options (which NewClient copies from the caller's): one
// OnConnect wrapper per client, however many Lockers use it. An entry
// goes when its client is collected.
var uptimes struct {
	mu sync.Mutex
	m  map[weak.Pointer[redis.Options]]*upState
}

// uptimeOf returns the upState of c, and installs, the first time, the
// OnConnect that feeds it: it runs the OnConnect c already had, if any,
// then reads INFO server on the new connection. A failed read does not
// fail the connection (the user's commands on it are not the guard's
// business); it makes the master count for nothing until a reading
// succeeds. The OnConnect of c's options is set here, so c must not make
// connections while the first Locker that watches it is made.
func uptimeOf(c *redis.Client) *upState {
	opt := c.Options()
	key := weak.Make(opt)
	uptimes.mu.Lock()
	defer uptimes.mu.Unlock()
	if u := uptimes.m[key]; u != nil {
		return u
	}
	if uptimes.m == nil {
		uptimes.m = make(map[weak.Pointer[redis.Options]]*upState)
	}
	u := &upState{addr: opt.Addr}
	if opt.Addr == failoverAddr {
		// A failover client dials whichever master Sentinel names.
		u.addr = "of the Sentinel group"
	}
	next := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		_ = u.read(ctx, cn, true)
		return nil
	}
	uptimes.m[key] = u
	runtime.AddCleanup(opt, func(k weak.Pointer[redis.Options]) {
		uptimes.mu.Lock()
		delete(uptimes.m, k)
		uptimes.mu.Unlock()
	}, key)
	return u
}

// A guard keeps the masters of one store out of service while they have
// been up for less than maxTTL, the longest TTL its Locker grants; masters
// whose address is in persistent (see WithPersistentMaster) always count.
// On one server or Sentinel it watches its client's one master (up); on
// Redis Cluster, the master of each key's slot, found per call.
type guard struct {
	maxTTL     time.Duration
	persistent []string
	up         *upState // nil on Redis Cluster
}

// newGuard returns the guard of a store on t, or nil when t's client is
// a master declared persistent. It fails when the client is of a type
// whose connections the guard cannot watch.
func newGuard(t topology, maxTTL time.Duration, persistent []string) (*guard, error) {
	g := &guard{maxTTL: maxTTL, persistent: persistent}
	if t.cluster != nil {
		// Nodes the cluster client makes from now on are watched from the
		// start; those it has already are watched from their first use.
		t.cluster.OnNewNode(func(c *redis.Client) { _ = uptimeOf(c) })
		return g, nil
	}
	c, ok := t.client.(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("%w: the restart guard needs a *redis.Client (of one server or of Sentinel) or a *redis.ClusterClient, not a %T", ErrInvalidArgument, t.client)
	}
	if g.persists(c.Options().Addr) {
		return nil, nil
	}
	g.up = uptimeOf(c)
	return g, nil
}

func (g *guard) persists(addr string) bool {
	for _, p := range g.persistent {
		if p == addr {
			return true
		}
	}
	return false
}

// master returns the upState of the master that serves key, and the
// client that reaches it; nil when that master is declared persistent.
func (g *guard) master(ctx context.Context, s redisStore, key string) (*upState, readServerInfo, error) {
	if g.up != nil {
		return g.up, s.client, nil
	}
	c, err := s.master(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	node, ok := c.(*redis.Client)
	if !ok {
		return nil, nil, fmt.Errorf("the master of %q is a %T, whose uptime cannot be watched", key, c)
	}
	if g.persists(node.Options().Addr) {
		return nil, nil, nil
	}
	return uptimeOf(node), node, nil
}

// before is what the guard does before a call on key is sent: it returns
// the master's state to check again once the reply is in (nil when the
// master always counts), or why the master does not count now, in which
// case nothing is sent. A master whose uptime is not known (its client's
// connections were made before the guard watched it, or their readings
// failed) is asked, in a round trip of its own, first.
func (g *guard) before(ctx context.Context, s redisStore, key string) (*upState, *RestartError, error) {
	u, c, err := g.master(ctx, s, key)
	if u == nil || err != nil {
		return nil, nil, err
	}
	if !u.known() {
		if err := u.read(ctx, c, false); err != nil {
			if ctx.Err() != nil {
				return nil, nil, err
			}
			return nil, &RestartError{Master: u.addr, Err: err}, nil
		}
	}
	if out := u.outOfService(time.Now(), g.maxTTL); out != nil {
		return nil, out, nil
	}
	return u, nil, nil
}

// after checks u again once a call's reply is in: a command that ran on a
// connection made since before (see the ordering above) has had its
// reading taken.
func (g *guard) after(u *upState) *RestartError {
	if u == nil {
		return nil
	}
	return u.outOfService(time.Now(), g.maxTTL)
}

// An attempt on a store with a guard goes past it in two steps, around
// the attempt itself (no closure, so that guarding allocates nothing):
//
//	u, res, done, err := s.admit(ctx, &ref)
//	if done { return res, err }
//	res, err = send()
//	return s.settleGuarded(ctx, u, &ref, ttlMS, heldAsLock, res, err)
//
// A master out of service is refused as a lock held by someone else for
// as long as it stays out (res.outOfService says why, and res.holderTTL
// how long, negative when unknown), so that a caller that waits tries
// again when it rejoins.

// admit is the first step: done is set when the attempt must not be sent,
// with its outcome.
func (s redisStore) admit(ctx context.Context, ref *lockRef) (u *upState, res acquireRes, done bool, err error) {
	u, out, err := s.guard.before(ctx, s, ref.key)
	switch {
	case err != nil:
		return nil, acquireRes{}, true, err
	case out != nil:
		return nil, out.refusal(), true, nil
	}
	return u, acquireRes{}, false, nil
}

// settleGuarded is the second step, once the attempt's reply (res or err)
// is in. An attempt that the guard refuses only now (a restart seen during
// the call) is undone first with the withdraw of the handles h says (their
// release where waiters are not queued), as a failed acquire is (see
// deleteIfOwned).
func (s redisStore) settleGuarded(ctx context.Context, u *upState, ref *lockRef, ttlMS any, h heldAs,
	res acquireRes, err error) (acquireRes, error) {
	out := s.guard.after(u)
	if out == nil {
		return res, err
	}
	if err == nil && res.ok || err != nil && mayHaveLanded(err) {
		var cleanup handleStore = s
		switch h {
		case heldAsPermit:
			cleanup = s.permits()
		case heldAsRW:
			cleanup = s.rwHandles()
		}
		ms, _ := ttlMS.(int64)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCleanupWait)
		if ref.queue == "" {
			_, _ = cleanup.release(cctx, *ref)
		} else {
			_, _ = cleanup.withdraw(cctx, *ref, ms)
		}
		cancel()
	}
	return out.refusal(), nil
}

// heldAs says what handles of an attempt's holds run on, for
// settleGuarded's cleanup: chosen there, so that a steady-state attempt
// makes no handleStore.
type heldAs int

const (
	heldAsLock   heldAs = iota // the store itself
	heldAsPermit               // permits()
	heldAsRW                   // rwHandles()
)

// refusal is the outcome of an attempt refused for e.
func (e *RestartError) refusal() acquireRes {
	ttl := time.Duration(-1)
	if e.Err == nil {
		ttl = e.StaysOut
	}
	return acquireRes{holderTTL: ttl, outOfService: e}
}

// refreshChecked is what a refresh on a store with a guard returns once
// its reply (ok or err) is in: a master out of service does not count,
// and its answer is an error. (Before it is sent, admit refuses it.)
func (s redisStore) refreshChecked(u *upState, ok bool, err error) (bool, error) {
	if out := s.guard.after(u); out != nil {
		return false, out
	}
	return ok, err
}
