package locksmith

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Asking every master of a quorum at once: the question, the answers, and
// the goroutines that ask.

// askOp is what a quorumCall asks of each master.
type askOp int

const (
	askAcquire askOp = iota
	askRelease
	askRefresh
	askPTTL
	askCheck
)

// quorumCall is one question asked of every master at once, with its
// answers in node order. Calls are reused (see askers.get), so that
// asking allocates nothing of its own but the bound of its wait (see
// bound).
type quorumCall struct {
	op   askOp
	ctx  context.Context // the call's, bounded: set by each
	req  acquireReq      // askAcquire; its lockRef for the others
	ttl  time.Duration   // askRefresh
	keys Keys            // askCheck
	need need            // askCheck
	// args is the script's arguments, laid out once for every master, as
	// luaScript.send takes them: for askRelease (see releaseArgs), and
	// for an askAcquire that tries once (see tryArgs); nil for an
	// askAcquire that each master lays out for itself.
	args []any

	answers []nodeAnswer
	wg      sync.WaitGroup // the masters still being asked

	// bounds bounds each use's wait (see each), with one timer for
	// every use of the call.
	bounds bounds
}

// nodeAnswer is one master's answer to a quorumCall.
type nodeAnswer struct {
	skip    bool       // not asked: see undo
	acquire acquireRes // askAcquire
	yes     bool       // askRelease, askRefresh; askPTTL: held
	ttl     time.Duration
	refused []string // askCheck
	err     error
}

// ask asks master i, n, and keeps its answer.
func (c *quorumCall) ask(i int, n redisStore) {
	a := &c.answers[i]
	if a.skip {
		return
	}
	switch c.op {
	case askAcquire:
		if c.args != nil {
			a.acquire, a.err = n.tryOnce(c.ctx, c.req, c.args)
		} else {
			a.acquire, a.err = n.acquire(c.ctx, c.req)
		}
	case askRelease:
		a.yes, a.err = n.releaseQueued(c.ctx, c.req.lockRef, c.args)
	case askRefresh:
		a.yes, a.err = n.refresh(c.ctx, c.req.lockRef, c.ttl)
	case askPTTL:
		a.ttl, a.yes, a.err = n.pttl(c.ctx, c.req.lockRef)
	case askCheck:
		a.refused, a.err = n.check(c.ctx, c.keys, c.need)
	}
}

// askers asks the masters after the first for a quorum's calls, each
// from goroutines that wait for work, so that a call starts no goroutine
// and allocates nothing to ask them. One goroutine a master starts with
// the first call; a call that finds every goroutine of a master busy
// (calls made at once) starts one more for it, up to maxAskers a master,
// which then stays for the calls that follow, so that a Locker's
// goroutines grow to the number of its calls in flight rather than being
// started anew for each. Past maxAskers, or after close, a call asks
// that master from a goroutine of its own, which the call waits for.
// close (Locker.Close) stops them all and waits for them.
type askers struct {
	nodes []redisStore
	// work[i] hands a call to an idle goroutine of master i; work[0] is
	// unused: the first master is asked from the caller's goroutine.
	work  []chan *quorumCall
	calls sync.Pool // of *quorumCall with len(nodes) answers

	mu      sync.Mutex // guards started, closed, serving
	started bool
	closed  bool
	serving []int // how many goroutines serve each master
	// idle[i] counts master i's goroutines that have no call and none
	// promised: each goroutine adds one when it is done with a call
	// (before the call's caller can go on) and a call that hands it one
	// takes one first, so that a call hands work only to a goroutine that
	// is at, or on its way to, its receive.
	idle    []atomic.Int32
	running atomic.Bool   // started and not closed: the fast path of start
	stop    chan struct{} // closed by close
	done    sync.WaitGroup
}

// maxAskers bounds the goroutines that serve one master of a quorum: a
// Locker with more calls in flight asks the rest from goroutines started
// for one call each.
const maxAskers = 64

func newAskers(nodes []redisStore) *askers {
	a := &askers{nodes: nodes, work: make([]chan *quorumCall, len(nodes)), serving: make([]int, len(nodes)),
		idle: make([]atomic.Int32, len(nodes)), stop: make(chan struct{})}
	for i := range a.work {
		a.work[i] = make(chan *quorumCall)
	}
	a.calls.New = func() any { return &quorumCall{answers: make([]nodeAnswer, len(nodes))} }
	return a
}

// start starts the goroutines, unless they run or were stopped.
func (a *askers) start() {
	if a.running.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.closed {
		return
	}
	a.started = true
	for i := 1; i < len(a.nodes); i++ {
		a.serving[i]++
		a.idle[i].Add(1)
		a.done.Add(1)
		go a.serve(i, nil)
	}
	a.running.Store(true)
}

// claim takes an idle goroutine of master i for a call, and reports
// whether there was one.
func (a *askers) claim(i int) bool {
	for n := a.idle[i].Load(); n > 0; n = a.idle[i].Load() {
		if a.idle[i].CompareAndSwap(n, n-1) {
			return true
		}
	}
	return false
}

// more starts one more goroutine for master i, which asks it c first, and
// reports whether it did: not when i has maxAskers already, nor after
// close.
func (a *askers) more(i int, c *quorumCall) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started || a.closed || a.serving[i] >= maxAskers {
		return false
	}
	a.serving[i]++
	a.done.Add(1)
	go a.serve(i, c)
	return true
}

// serve asks master i c, when not nil, then every call handed to it,
// until close.
func (a *askers) serve(i int, c *quorumCall) {
	defer a.done.Done()
	for {
		if c != nil {
			c.ask(i, a.nodes[i])
			a.idle[i].Add(1)
			c.wg.Done()
		}
		select {
		case c = <-a.work[i]:
		case <-a.stop:
			return
		}
	}
}

// close stops the goroutines and waits for them; calls made after it
// still work.
func (a *askers) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		a.running.Store(false)
		close(a.stop)
	}
	a.mu.Unlock()
	a.done.Wait()
}

// get returns a call of op with no answers; put it back when done.
func (a *askers) get(op askOp) *quorumCall {
	c := a.calls.Get().(*quorumCall)
	c.op = op
	return c
}

// put takes back a call whose answers have been read.
func (a *askers) put(c *quorumCall) {
	clear(c.answers)
	c.req, c.keys, c.ctx, c.args = acquireReq{}, Keys{}, nil, nil
	a.calls.Put(c)
}

// each asks every master c's question at once, with one deadline of
// wait for all (or the caller's, when it is sooner), and returns when all
// have answered.
func (q quorumStore) each(ctx context.Context, wait time.Duration, c *quorumCall) {
	c.ctx = ctx
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > wait {
		c.bound(ctx, wait)
		defer c.unbound()
	}
	a := q.helpers
	a.start()
	for i := 1; i < len(q.nodes); i++ {
		c.wg.Add(1)
		switch {
		case a.claim(i):
			select {
			case a.work[i] <- c:
				continue
			case <-a.stop:
				// Closed before the goroutine took it.
			}
		case a.more(i, c):
			continue
		}
		go func() {
			defer c.wg.Done()
			c.ask(i, q.nodes[i])
		}()
	}
	c.ask(0, q.nodes[0])
	c.wg.Wait()
}

// bound sets c.ctx to parent with a deadline wait away, until unbound,
// which each calls once every master has answered (see bounds).
func (c *quorumCall) bound(parent context.Context, wait time.Duration) {
	now := time.Now()
	c.ctx = c.bounds.start(parent, now, now.Add(wait))
}

// unbound ends the use that bound started.
func (c *quorumCall) unbound() { c.bounds.stop() }
