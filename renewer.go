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
// trip per window in which renewals fall due, not one per lease.
//
// The renewer has no goroutine of its own: a timer fires when the first
// renewal falls due, and its callback (on a goroutine of the runtime's,
// for that firing only) sends the first master's pipeline itself and
// each other master's on a goroutine of its own, so that a master that is
// slow to answer delays only the leases it holds. A lease released before
// its first renewal, as most are, costs a place in the order and nothing
// else: not even a watchdog timer, which the renewer arms when it takes
// the lease out of the order (see leaseState.watchdog). Each lease's
// result is applied as its own renewal's would be (see Lock.renew): a
// lock found gone is lost at once, a failed refresh is retried sooner,
// and the watchdog of each lease, not its pipeline, declares it lost when
// its validity runs out. A Lock whose lease is renewed here is in the
// renewer's order (leaseState.at >= 0) or in a pipeline in flight
// (leaseState.flight), never both; stopRenewal leaves it in the order,
// stopped (the renewer sends nothing for it), and waits for its pipeline,
// as it waits for a lease's goroutine: the leases own the goroutines that
// renew them. It leaves the order when the lock ends.
//
// Quorums, sets, semaphores and read-write holds, and locks with the
// restart guard, keep a goroutine per lease (Lock.renew).

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

	mu    sync.Mutex
	order renewOrder  // the locks waiting for their next renewal, earliest first
	timer *time.Timer // fires (fire) when the first of them falls due; nil until the first lease
	// armed is when the timer is set to fire, zero once it has fired
	// (fire then sets it again). It may be earlier than the first
	// renewal in the order: see armLocked.
	armed time.Time
}

func newRenewer(t topology) *renewer {
	return &renewer{topology: t}
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
		r.armLocked() // (a first lease moved later leaves the timer early: see armLocked)
	}
}

// remove takes lk out of the order, if it is there. lk.mu must be held.
func (r *renewer) remove(lk *Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at := lk.lease.at; at >= 0 {
		heap.Remove(&r.order, at) // the timer stays set: see armLocked
	}
}

// armLocked sets the timer for the first renewal in the order, unless it
// is set to fire by then already. A lease taken out of the order leaves
// the timer as it is: a firing with nothing due costs a look at the order
// and sets the timer again (takeDue). So a lease released before its
// first renewal, as most are, costs no timer operation when the timer is
// set for an earlier lease's (one released earlier, in a loop of them).
// The price: a renewer whose leases have all ended stays reachable from
// its timer until that fires, at most one renewal interval.
// r.mu must be held.
func (r *renewer) armLocked() {
	if len(r.order) == 0 {
		return
	}
	due := r.order[0].lease.due
	if !r.armed.IsZero() && !r.armed.After(due) {
		return
	}
	r.armed = due
	wait := time.Until(due)
	if r.timer == nil {
		r.timer = time.AfterFunc(wait, r.fire)
		return
	}
	r.timer.Reset(wait)
}

// fire sends the renewals due now, on the timer's goroutine, and sets the
// timer for the next.
func (r *renewer) fire() {
	r.send(r.takeDue(time.Now()))
}

// takeDue takes out of the order the locks whose renewal may be sent at
// now: those due by now plus their slack; and sets the timer for the
// first of the others.
func (r *renewer) takeDue(now time.Time) []*Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = time.Time{} // it has fired
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
	r.armLocked()
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

// send sends the renewals of locks, one pipeline per master: the first
// on the calling goroutine (the timer's), each other on a goroutine of its
// own, so that a slow master holds up no other's. A lock whose lease
// ended or stopped since it was taken from the order is left out.
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
	fly := func(c redis.UniversalClient) {
		ctx, cancel := context.WithDeadline(context.Background(), latest)
		defer cancel()
		r.fly(ctx, c, groups[c])
	}
	for i := 1; i < len(order); i++ {
		// Owned by the leases it renews: each one's stopRenewal (and so
		// Release) waits for it, on the renewal's flight channel, and it
		// ends by the latest of their deadlines.
		go fly(order[i])
	}
	if len(order) > 0 {
		fly(order[0])
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
// WithMaxHold (lost then). Out of the order, the lease is watched by its
// watchdog, armed here if it was not yet (see leaseState.watchdog).
func (lk *Lock) boardRenewal() (renewal, bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls := lk.lease
	if !lk.released && lk.lost == nil && lk.cappedLocked() {
		lk.loseLocked(lk.capCause())
	}
	if lk.released || lk.lost != nil {
		ls.batched = false
		return renewal{}, false
	}
	lk.watchLocked()
	if !ls.batched || ls.stopped || ls.parent.Err() != nil {
		ls.batched = false
		return renewal{}, false
	}
	ls.flight = make(chan struct{})
	return renewal{lk: lk, ttl: lk.ttl, deadline: lk.deadline, flight: ls.flight, args: refreshArgs(lk.ref, lk.ttl)}, true
}

// landRenewal applies the result of lk's renewal sent at start: held
// (the refresh found the token) or err, as a lease's own goroutine
// applies a refresh's (applyRefresh, settleRenewal), and schedules the
// next renewal unless the lease ended or stopped.
func (lk *Lock) landRenewal(rn renewal, start time.Time, held bool, err error) {
	if err == nil {
		err = lk.applyRefresh(start, rn.ttl, lk.cfg.driftFor(rn.ttl), held)
	}
	lk.mu.Lock()
	ls := lk.lease
	ended := ls.parent.Err() != nil
	lk.mu.Unlock()
	next, more := lk.settleRenewal(err, ended)
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls.flight = nil
	close(rn.flight)
	if !more || !ls.batched || ls.stopped || lk.released || lk.lost != nil || ls.parent.Err() != nil {
		ls.batched = false
		return
	}
	lk.scheduleLocked(lk.batchRenewer(), time.Now(), next)
}
