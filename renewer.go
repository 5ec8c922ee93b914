package locksmith

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases renewed together.
//
// A lease of a plain lock on one server, Sentinel or Cluster (New, without
// the restart guard) is renewed by its store's renewer rather than by a
// goroutine of its own: the renewer keeps the leased locks in order of
// their next renewal, and when the first falls due it takes every lock
// due within a short window after it (renewSlack: a tenth of the lock's
// renewal interval, at most 50ms; a renewal may come that much early,
// never late) and sends their refreshes together, one pipeline per
// master. So a process holding thousands of leases sends about one round
// trip per window in which renewals fall due, not one per lease, and
// keeps one goroutine for all of them, plus one per pipeline in flight.
//
// Each pipeline is sent by a goroutine of its own, so that a master that
// is slow to answer delays only the leases it holds; each lease's result
// is applied as its own renewal's would be (see Lock.renew): a lock found
// gone is lost at once, a failed refresh is retried sooner, and the
// watchdog of each lease, not its pipeline, declares it lost when its
// validity runs out. A Lock whose lease is renewed here is in the
// renewer's order (leaseState.at >= 0) or in a pipeline in flight
// (leaseState.flight), never both; stopRenewal takes it out of the order
// and waits for its pipeline, as it waits for a lease's goroutine.
//
// The renewer's goroutine runs while some lock is in its order, and
// returns when none is: the last lease's end stops it. Quorums, sets,
// semaphores and read-write holds, and locks with the restart guard, keep
// a goroutine per lease (Lock.renew).

// renewAlone, set only by the benchmarks that compare the two designs
// (BenchmarkLeasesAtScale), makes every lease renew with a goroutine of its
// own, as before renewers. Leases started while it is set keep that way.
var renewAlone atomic.Bool

// maxRenewSlack bounds how early a renewal may be sent to join others.
const maxRenewSlack = 50 * time.Millisecond

// renewSlack is how early a renewal every interval may be sent.
func renewSlack(interval time.Duration) time.Duration {
	return min(interval/10, maxRenewSlack)
}

// A renewer renews the leases of the plain locks of one store together.
type renewer struct {
	topology

	mu      sync.Mutex
	order   renewOrder    // the locks waiting for their next renewal, earliest first
	wake    chan struct{} // the first renewal changed, or the order emptied; room for one
	running bool          // run is running (or about to)
	runs    sync.WaitGroup
	flights sync.WaitGroup
}

func newRenewer(t topology) *renewer {
	return &renewer{topology: t, wake: make(chan struct{}, 1)}
}

// renewOrder is a heap of locks by their next renewal (leaseState.due).
// Its fields are guarded by the renewer's mu.
type renewOrder []*Lock

func (o renewOrder) Len() int           { return len(o) }
func (o renewOrder) Less(i, j int) bool { return o[i].lease.due.Before(o[j].lease.due) }
func (o renewOrder) Swap(i, j int) {
	o[i], o[j] = o[j], o[i]
	o[i].lease.at, o[j].lease.at = i, j
}
func (o *renewOrder) Push(x any) {
	lk := x.(*Lock)
	lk.lease.at = len(*o)
	*o = append(*o, lk)
}
func (o *renewOrder) Pop() any {
	old := *o
	lk := old[len(old)-1]
	old[len(old)-1] = nil
	*o = old[:len(old)-1]
	lk.lease.at = -1
	return lk
}

// schedule puts lk in the order, or moves it there, to be renewed at due,
// as early as slack before. lk.mu must be held (lk.mu comes before r.mu).
func (r *renewer) schedule(lk *Lock, due time.Time, slack time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := lk.lease
	ls.due, ls.slack = due, slack
	if ls.at >= 0 {
		heap.Fix(&r.order, ls.at)
	} else {
		heap.Push(&r.order, lk)
	}
	if r.order[0] == lk {
		r.signal()
	}
	if !r.running {
		r.running = true
		r.runs.Add(1)
		go r.run()
	}
}

// remove takes lk out of the order, if it is there. lk.mu must be held.
func (r *renewer) remove(lk *Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at := lk.lease.at; at >= 0 {
		heap.Remove(&r.order, at)
		r.signal()
	}
}

// signal wakes run to look at the order again. r.mu must be held.
func (r *renewer) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run sends the renewals as they fall due, until the order is empty.
func (r *renewer) run() {
	defer r.runs.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if len(r.order) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		wait := time.Until(r.order[0].lease.due)
		r.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-r.wake:
				timer.Stop()
				continue
			}
		}
		r.send(r.takeDue(time.Now()))
	}
}

// takeDue takes out of the order the locks whose renewal may be sent at
// now: those due by now plus their slack.
func (r *renewer) takeDue(now time.Time) []*Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []*Lock
	// The order is by due time, not by due time less slack: look past a
	// lock that may not go yet, as far as any lock might (maxRenewSlack).
	var later []*Lock
	for len(r.order) > 0 && !r.order[0].lease.due.After(now.Add(maxRenewSlack)) {
		lk := heap.Pop(&r.order).(*Lock)
		if lk.lease.due.After(now.Add(lk.lease.slack)) {
			later = append(later, lk)
			continue
		}
		due = append(due, lk)
	}
	for _, lk := range later {
		heap.Push(&r.order, lk)
	}
	return due
}

// A renewal is one lock's refresh in a pipeline.
type renewal struct {
	lk       *Lock
	ttl      time.Duration
	deadline time.Time
	args     []any
	cmd      *redis.Cmd
	flight   chan struct{}
}

// send starts the renewals of locks, one pipeline per master, each sent
// by a goroutine of its own. A lock whose lease ended or stopped since it
// was taken from the order is left out.
func (r *renewer) send(locks []*Lock) {
	if len(locks) == 0 {
		return
	}
	groups := map[redis.UniversalClient][]renewal{}
	var order []redis.UniversalClient
	var latest time.Time
	for _, lk := range locks {
		rn, ok := lk.boardRenewal()
		if !ok {
			continue
		}
		c, err := r.master(context.Background(), rn.lk.ref.key)
		if err != nil {
			c = r.client // the cluster client finds the master itself
		}
		if _, ok := groups[c]; !ok {
			order = append(order, c)
		}
		groups[c] = append(groups[c], rn)
		if rn.deadline.After(latest) {
			latest = rn.deadline
		}
	}
	for _, c := range order {
		rns := groups[c]
		r.flights.Add(1)
		go func() {
			defer r.flights.Done()
			ctx, cancel := context.WithDeadline(context.Background(), latest)
			defer cancel()
			r.fly(ctx, c, rns)
		}()
	}
}

// fly sends the refreshes of rns in one pipeline on c (and those the
// server did not have the script for again, with EVAL), then applies each
// result to its lock.
func (r *renewer) fly(ctx context.Context, c redis.UniversalClient, rns []renewal) {
	start := time.Now()
	pipe := c.Pipeline()
	for i := range rns {
		rns[i].cmd = refreshLua.command(ctx, rns[i].args, false)
		_ = pipe.Process(ctx, rns[i].cmd)
	}
	_, _ = pipe.Exec(ctx)
	// Again, those the server did not have the script for, with EVAL;
	// and on Redis Cluster those whose slot moved or migrates, through
	// the cluster client, which follows them.
	var again, moved redis.Pipeliner
	for i := range rns {
		switch err := rns[i].cmd.Err(); {
		case noScript(err):
			if again == nil {
				again = c.Pipeline()
			}
			rns[i].cmd = refreshLua.command(ctx, rns[i].args, true)
			_ = again.Process(ctx, rns[i].cmd)
		case r.sharded() && clusterRefused(err):
			if moved == nil {
				moved = r.client.Pipeline()
			}
			rns[i].cmd = refreshLua.command(ctx, rns[i].args, false)
			_ = moved.Process(ctx, rns[i].cmd)
		}
	}
	for _, p := range []redis.Pipeliner{again, moved} {
		if p != nil {
			_, _ = p.Exec(ctx)
		}
	}
	if moved != nil {
		for i := range rns {
			if noScript(rns[i].cmd.Err()) {
				rns[i].cmd = refreshLua.send(ctx, r.client, rns[i].args)
			}
		}
	}
	for _, rn := range rns {
		n, err := rn.cmd.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			err = fmt.Errorf("locksmith: refresh %q: %w", rn.lk.name(), err)
		} else {
			err = nil
		}
		rn.lk.landRenewal(rn, start, n == 1, err)
	}
}

// boardRenewal prepares lk's renewal, taken from the order, for a
// pipeline, and marks it in flight; it reports false when the lease
// ended, stopped or lost its context meanwhile, or the lock reached its
// WithMaxHold (lost then).
func (lk *Lock) boardRenewal() (renewal, bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls := lk.lease
	if !lk.released && lk.lost == nil && lk.cappedLocked() {
		lk.loseLocked(lk.capCause())
	}
	if !ls.batched || ls.stopped || lk.released || lk.lost != nil || ls.parent.Err() != nil {
		ls.batched = false
		return renewal{}, false
	}
	ls.flight = make(chan struct{})
	rn := renewal{lk: lk, ttl: lk.ttl, deadline: lk.deadline, flight: ls.flight}
	rn.args = refreshLua.prepare([]any{nil, nil, 1, lk.ref.lockKey, lk.ref.token, lk.ttl.Milliseconds()})
	if lk.ref.leader != "" {
		rn.args = refreshLua.prepare([]any{nil, nil, 2, lk.ref.lockKey, lk.ref.leader, lk.ref.token, lk.ttl.Milliseconds()})
	}
	return rn, true
}

// landRenewal applies the result of lk's renewal sent at start: held
// (the refresh found the token) or err, as Lock.renew applies a refresh's,
// and schedules the next renewal unless the lease ended or stopped.
func (lk *Lock) landRenewal(rn renewal, start time.Time, held bool, err error) {
	lk.mu.Lock()
	ls := lk.lease
	parentDone := ls.parent.Err() != nil
	if err == nil && !held {
		err = lk.notHeld()
	}
	if err == nil && lk.lost != nil {
		err = fmt.Errorf("%w: %w", ErrNotHeld, lk.lost)
	}
	if err == nil && !lk.released {
		lk.deadline = start.Add(rn.ttl - lk.cfg.driftFor(rn.ttl))
		if rn.ttl != lk.ttl {
			// Refresh changed the TTL while this renewal was in flight:
			// the key now has the renewal's, and so has the handle.
			lk.ttl = rn.ttl
			ls.watchdog.Reset(lk.untilWatchdogLocked())
		}
	}
	lk.mu.Unlock()
	if lk.obs != nil && !parentDone {
		lk.lockEvent(EventRenewal, err)
	}
	if errors.Is(err, ErrNotHeld) && !parentDone {
		lk.lose(fmt.Errorf("%w: renewal found %q expired or held by another owner", ErrLockLost, lk.name()))
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls.flight = nil
	close(rn.flight)
	if !ls.batched || ls.stopped || lk.released || lk.lost != nil || ls.parent.Err() != nil {
		ls.batched = false
		return
	}
	every := lk.cfg.renewInterval(lk.ttl)
	due := time.Now().Add(lk.untilRenewalLocked())
	if err != nil {
		ls.lastErr = err
		due = time.Now().Add(max(every/4, time.Millisecond))
	}
	lk.store.(redisStore).renewer.schedule(lk, due, renewSlack(every))
}
