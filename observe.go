package locksmith

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksmith-go/locksmith/internal/notify"
)

// Observing a Locker: the events, the Observer that receives them, and
// the buffer and goroutine that deliver them.

// An Observer receives the events of a Locker given WithObserver: what
// its locks, semaphores and read-write locks do, and what its pub/sub
// connections do. See Event.
//
// Observe is called from one goroutine of the Locker, one event at a
// time, in the order the events were emitted, never from a goroutine that
// obtains, renews or releases a lock, nor from the one that reads release
// announcements: a slow Observe delays only later events. Events are
// delivered in batches, about a millisecond apart while they keep coming,
// so that observing adds no wake-up to the calls that emit them: an event
// reaches Observe within about a millisecond of its Time, plus the time
// Observe takes with the events before it. Events are
// buffered (1024 of them); when the buffer is full, new events are
// dropped and counted (see Event.Dropped and Locker.ObserverStats), so
// locking never waits for an observer. A panic in Observe is recovered
// and counted; the next event is delivered as usual.
//
// Observe must return: Locker.Close delivers the events still buffered
// and waits for Observe to return from each of them.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc is a function that is an Observer.
type ObserverFunc func(e Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// WithObserver makes the Locker report what it does to o (see Observer
// and Event). It is an option of New and NewQuorum only: given to a
// single call, it makes that call fail with ErrInvalidArgument. Many
// events belong to no single call (a pub/sub connection's state, the
// renewals and loss of a lease that outlives its Obtain), and all are
// delivered in order by one goroutine of the Locker, which an observer
// per call would split; a caller that wants to watch one call can time it
// itself. A nil o is refused with ErrInvalidArgument. With several
// WithObserver options, the last wins.
//
// Without WithObserver a Locker emits nothing, starts no goroutine for
// it, and allocates nothing for it.
func WithObserver(o Observer) Option {
	return Option{kind: optObserver, obs: o}
}

// observerOf returns the observer the last valid WithObserver in opts
// gives, if any.
func observerOf(opts []Option) *observer {
	var o Observer
	for _, opt := range opts {
		if opt.kind == optObserver && opt.obs != nil {
			o = opt.obs
		}
	}
	if o == nil {
		return nil
	}
	return newObserver(o, observerBuffer)
}

// observerBuffer is how many events wait for the observer before new ones
// are dropped.
const observerBuffer = 1024

// ObserverStats counts what happened to a Locker's events.
type ObserverStats struct {
	// Delivered counts the events Observe has returned from (or
	// panicked in).
	Delivered uint64
	// Dropped counts the events dropped because the buffer was full, or
	// because they happened after Close (a lock obtained before Close can
	// still be renewed and released).
	Dropped uint64
	// Panicked counts the calls of Observe that panicked.
	Panicked uint64
}

// ObserverStats returns the counts of the Locker's events so far; all
// zero without WithObserver. It is safe to call concurrently with
// anything.
func (l *Locker) ObserverStats() ObserverStats {
	ob := l.obs
	if ob == nil {
		return ObserverStats{}
	}
	return ObserverStats{Delivered: ob.delivered.Load(), Dropped: ob.dropped.Load(), Panicked: ob.panicked.Load()}
}

// observer delivers a Locker's events to its Observer: emit puts them in
// a bounded buffer, without waiting, and one goroutine, started by the
// first event and stopped by close, takes them out and calls Observe.
type observer struct {
	o Observer

	mu    sync.RWMutex // guards the fields below; emit holds it shared while it sends
	state observeState
	ch    chan Event    // the buffer; made by start, never closed
	stop  chan struct{} // closed by close, once the goroutine runs
	done  chan struct{} // closed when the goroutine has returned
	size  int           // ch's capacity

	delivered, dropped, panicked atomic.Uint64
	// unreported counts the drops not yet reported in an Event.Dropped.
	unreported atomic.Uint64
}

type observeState uint8

const (
	observeIdle    observeState = iota // no goroutine yet
	observeRunning                     // the goroutine delivers
	observeClosed                      // Close was called: events are dropped
)

func newObserver(o Observer, size int) *observer {
	return &observer{o: o, size: size}
}

// emit queues e for delivery, or drops it when the buffer is full or the
// Locker is closed. It never waits for the observer, so that it may be
// called from anywhere: a renewal, a dispatcher, under a Lock's mutex.
func (ob *observer) emit(e Event) {
	e.Time = time.Now()
	ob.mu.RLock()
	if ob.state == observeIdle {
		ob.mu.RUnlock()
		ob.start()
		ob.mu.RLock()
	}
	sent := false
	if ob.state == observeRunning {
		select {
		case ob.ch <- e:
			sent = true
		default:
		}
	}
	ob.mu.RUnlock()
	if !sent {
		ob.dropped.Add(1)
		ob.unreported.Add(1)
	}
}

// start starts the delivering goroutine, unless it runs or the Locker was
// closed.
func (ob *observer) start() {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.state != observeIdle {
		return
	}
	ob.ch = make(chan Event, ob.size)
	ob.stop, ob.done = make(chan struct{}), make(chan struct{})
	ob.state = observeRunning
	go ob.run(ob.ch, ob.stop, ob.done)
}

// observerLinger is how long the delivering goroutine lets events gather
// after delivering a batch, before it waits for the next one: woken for
// every event, it would cost each obtain and release a wake-up of its own
// (on two cores, about a third more time per Obtain+Release in the
// benchmark), and batched it costs them none.
const observerLinger = time.Millisecond

// run delivers the events of ch until stop is closed, and then those left
// in ch. Once woken by an event, it delivers every event buffered, then
// lets more gather for observerLinger (unless stop is closed meanwhile)
// before it waits again.
func (ob *observer) run(ch <-chan Event, stop, done chan struct{}) {
	defer close(done)
	linger := time.NewTimer(observerLinger)
	linger.Stop()
	for {
		select {
		case e := <-ch:
			ob.deliver(e)
			ob.deliverBuffered(ch)
			linger.Reset(observerLinger)
			select {
			case <-linger.C:
			case <-stop:
				linger.Stop()
			}
		case <-stop:
			// close holds no emit out any more: what ch holds is all.
			ob.deliverBuffered(ch)
			return
		}
	}
}

// deliverBuffered delivers the events ch holds, without waiting for more.
func (ob *observer) deliverBuffered(ch <-chan Event) {
	for {
		select {
		case e := <-ch:
			ob.deliver(e)
		default:
			return
		}
	}
}

// deliver calls Observe with e, recovering a panic.
func (ob *observer) deliver(e Event) {
	e.Dropped = ob.unreported.Swap(0)
	defer func() {
		if recover() != nil {
			ob.panicked.Add(1)
		}
		ob.delivered.Add(1)
	}()
	ob.o.Observe(e)
}

// close stops the delivering goroutine, after it has delivered what is
// buffered, and waits for it. Events emitted later are dropped. It is
// safe to call more than once, and on a nil observer.
func (ob *observer) close() {
	if ob == nil {
		return
	}
	ob.mu.Lock()
	if ob.state == observeRunning {
		close(ob.stop)
	}
	ob.state = observeClosed
	done := ob.done
	ob.mu.Unlock()
	if done != nil {
		<-done
	}
}

// tries is what an obtaining call did to get its hold, for its event.
type tries struct {
	attempts   int
	handedOver bool
}

// obtained reports to the observer, if there is one, the end of an
// obtaining call for key that started at start and returned lk or err; a
// hold it obtained is then observed, and traced, too.
func (l *Locker) obtained(key, prefix string, h Hold, start time.Time, tr tries, lk *Lock, err error) {
	now := time.Now()
	if lk != nil {
		lk.obs = &lockObserver{l: l, acquired: now}
	}
	if l.obs != nil {
		l.obs.emit(Event{Kind: EventObtain, Key: key, Prefix: prefix, Hold: h, Waited: now.Sub(start),
			Attempts: tr.attempts, HandedOver: tr.handedOver, Err: err, Class: classOf(err)})
	}
}

// obtainedSet is obtained for a set of locks on keys.
func (l *Locker) obtainedSet(keys []string, prefix string, start time.Time, tr tries, lk *Lock, err error) {
	now := time.Now()
	if lk != nil {
		lk.obs = &lockObserver{l: l, acquired: now}
	}
	if l.obs != nil {
		l.obs.emit(Event{Kind: EventObtain, Key: keys[0], Keys: keys, Prefix: prefix, Hold: HoldLock,
			Waited: now.Sub(start), Attempts: tr.attempts, HandedOver: tr.handedOver, Err: err, Class: classOf(err)})
	}
}

// refused reports an obtaining call for key with opts refused for its
// arguments, or because the Locker is closed, before it sent anything:
// to the observer as an EventObtain, and to the tracer as an OpObtain
// started and ended at once, within ctx.
func (l *Locker) refused(ctx context.Context, key string, opts []Option, h Hold, err error) {
	if l.obs == nil && l.tracer == nil {
		return
	}
	prefix := l.prefixOf(opts)
	if l.obs != nil {
		l.obs.emit(Event{Kind: EventObtain, Key: key, Prefix: prefix, Hold: h, Err: err, Class: classOf(err)})
	}
	_, s := l.span(ctx, Call{Op: OpObtain, Key: key, Prefix: prefix, Hold: h})
	s.end(Outcome{Err: err})
}

// prefixOf returns the prefix of a call with opts, for its events: the
// last WithPrefix among them, or the Locker's.
func (l *Locker) prefixOf(opts []Option) string {
	prefix := l.cfg.prefix
	for _, o := range opts {
		if o.kind == optPrefix {
			prefix = o.s
		}
	}
	return prefix
}

// lockObserver is what a Lock obtained by an observed or traced Locker
// keeps for its events and its traced release.
// (The Locker, rather than its observer and tracer: a pointer less keeps
// it in the allocation size class it had before tracing.)
type lockObserver struct {
	l        *Locker   // the Locker that obtained the lock
	acquired time.Time // when the lock was obtained
}

// lockEvent reports an event of kind k of lk, whose obs is set, if its
// Locker has an observer.
func (lk *Lock) lockEvent(k EventKind, err error) {
	ob := lk.obs.l.obs
	if ob == nil {
		return
	}
	ob.emit(Event{Kind: k, Key: lk.key, Keys: lk.setKeys(), Prefix: lk.cfg.prefix, Hold: lk.hold,
		Held: time.Since(lk.obs.acquired), Err: err, Class: classOf(err)})
}

// onceResult reports the result of a call of Once on key with opts.
func (l *Locker) onceResult(key string, opts []Option, ran, failed bool, err error) {
	l.obs.emit(Event{Kind: EventOnce, Key: key, Prefix: l.prefixOf(opts), Once: onceResultOf(ran, err), Err: err,
		Class: callClass(err, failed)})
}

// onceResultOf returns what a call of Once that returned ran and err
// did.
func onceResultOf(ran bool, err error) OnceResult {
	switch {
	case ran && err == nil:
		return OnceRecorded
	case ran:
		return OnceRan
	case err != nil:
		return OnceNotRun
	}
	return OnceSkipped
}

// connStates are the notifier's connection states as an Event's.
var connStates = [...]ConnState{notify.ConnUp: ConnUp, notify.ConnDown: ConnDown,
	notify.ConnReplaced: ConnReplaced, notify.ConnClosed: ConnClosed}

// connEvent reports a change of state of one of the notifier's pub/sub
// connections, as an EventSubscriber.
func (ob *observer) connEvent(e notify.ConnEvent) {
	ob.emit(Event{Kind: EventSubscriber, Conn: connStates[e.State], Node: e.Node, Attempts: e.Attempts, Err: e.Err,
		Class: classOf(e.Err)})
}
