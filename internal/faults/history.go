//go:build linux

package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// A Kind names what an Op records.
type Kind string

// The kinds of Op.
const (
	// KindObtain is one Obtain call, or one Acquire call of a semaphore
	// (with its Limit), or one ObtainAll call of a set of locks (one op
	// per key, see Op.Set); Fence is set when it succeeded.
	KindObtain Kind = "obtain"
	// KindRelease is one Release call, with the fence of what it gave
	// back.
	KindRelease Kind = "release"
	// KindHold is the window in which a holder believed its lock (or its
	// permit of a semaphore) valid: Call is when Obtain returned the lock,
	// Return when the window ended (the earliest of Release being called,
	// the lease context ending, and the lock's Deadline), and ObtainCall
	// when Obtain was called.
	KindHold Kind = "hold"
	// KindWrite is one write to the fenced Store, timed inside the store:
	// Key is the record written, Under the lock or semaphore held for it
	// when that is another key.
	KindWrite Kind = "write"
	// KindFault is one injected fault, from its start to its end; Detail
	// names it.
	KindFault Kind = "fault"
)

// Outcomes of operations.
const (
	OutcomeOK          = "ok"           // obtain, release
	OutcomeNotObtained = "not-obtained" // obtain: held by another
	OutcomeLost        = "lost"         // obtain: the reply came too late (ErrLockLost)
	OutcomeNotHeld     = "not-held"     // release: the lock was gone
	OutcomeError       = "error"        // obtain, release: anything else
	OutcomeAccepted    = "accepted"     // write
	OutcomeRejected    = "rejected"     // write: a higher fence was seen
)

// The holds of a read-write lock, for Op.Access.
const (
	AccessRead  = "read"  // shared with other readers
	AccessWrite = "write" // exclusive of readers and other writers
)

// An Op is one recorded operation, holding window or fault. Times are
// nanoseconds on one Clock.
type Op struct {
	Kind       Kind   `json:"kind"`
	Key        string `json:"key,omitempty"`
	Holder     string `json:"holder,omitempty"`
	Fence      int64  `json:"fence,omitempty"`
	Call       int64  `json:"call"`
	Return     int64  `json:"return"`
	ObtainCall int64  `json:"obtainCall,omitempty"` // holds only
	Outcome    string `json:"outcome,omitempty"`
	Detail     string `json:"detail,omitempty"`
	// Limit is, on the obtains and holds of a semaphore's permits, how
	// many permits the semaphore allows at once; 0 for a lock, which
	// allows one holder.
	Limit int `json:"limit,omitempty"`
	// Under is, on a write, the key of the lock or semaphore that the
	// writer held, when it is not Key: the holders of a semaphore's
	// permits write each to a record of their own (a job each), which
	// keeps the fence of the permit that claimed it, not to one register.
	Under string `json:"under,omitempty"`
	// Access is, on the obtains and holds of a read-write lock, which
	// hold it is: AccessRead or AccessWrite; empty for a lock or a
	// semaphore. A write window is exclusive: it may overlap no other
	// window of its key, read or write, while read windows may overlap
	// each other, any number of them.
	Access string `json:"access,omitempty"`
	// Set is, on the obtains, holds and releases of a set of locks
	// (Locker.ObtainAll of several keys), the keys of the whole set,
	// sorted. A set is recorded as one op of each kind per key, with the
	// same times and outcome: Key is the key, and Fence its own fencing
	// token (Lock.FenceOf), so that the set's window on each key is
	// checked against every other window of that key, a single key's or
	// another set's, and its fences in that key's order. Empty for
	// everything else.
	Set []string `json:"set,omitempty"`
	// Unfenced marks the obtains, holds and releases of a call made
	// without WithFencing: Fence is 0, which the fence order and the
	// model's fences do not apply to; its windows are checked as the
	// others. Its holder's name must tell its calls apart (it is how a
	// release finds its window), and it writes nothing to the store.
	Unfenced bool `json:"unfenced,omitempty"`
	// LosesData marks a fault during which the server may have forgotten
	// its keys (a restart without persistence): holding windows that
	// overlap across it are reported as excused, not as violations.
	LosesData bool `json:"losesData,omitempty"`
}

func (op Op) String() string {
	b, _ := json.Marshal(op)
	return string(b)
}

// A Recorder records operations. History is one; a helper process
// records by sending its operations to the test process.
type Recorder interface {
	Record(op Op)
}

// A History is the record of one fault run. The zero History is empty and
// ready to use. A History is safe for concurrent use.
type History struct {
	mu  sync.Mutex // guards ops
	ops []Op
}

// Record adds op to the history.
func (h *History) Record(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Ops returns a copy of the operations recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// WriteJSON writes the operations recorded so far to path, one JSON
// object a line.
func (h *History) WriteJSON(path string) error {
	var b strings.Builder
	for _, op := range h.Ops() {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Check checks the operations recorded so far; see CheckOps.
func (h *History) Check() *Report { return CheckOps(h.Ops()) }

// A Report is what CheckOps found in a history.
type Report struct {
	Ops          int // operations, windows and faults recorded
	Obtains      int // Obtain, Acquire and ObtainAll calls (a set's once)
	Acquisitions int // successful Obtain, Acquire and ObtainAll calls (a set's once)
	Sets         int // successful ObtainAll calls of several keys
	Releases     int // Release calls (a set's once)
	Writes       int // writes to the fenced store
	Accepted     int // writes the store accepted
	Rejected     int // writes the store rejected
	// Stale writes are those that reached the store after their writer's
	// holding window had ended (it was paused, or ignored its lease).
	Stale, StaleAccepted, StaleRejected int
	// Faults counts the injected faults by kind.
	Faults map[string]int
	// Limits is how many holders each key allows at once: 1 for a lock,
	// the largest limit its calls passed for a semaphore; for a
	// read-write lock (see ReadWrite) 1 as well, which binds only when a
	// writer is among them.
	Limits map[string]int
	// ReadWrite names the keys of read-write locks: those whose holds
	// have an Access. Any number of read windows may overlap on them; a
	// write window overlaps no other.
	ReadWrite map[string]bool
	// Peak is, by key, the most holding windows that were open at one
	// instant, not counting those excused by a loss of data.
	Peak map[string]int
	// ExcusedOverlaps counts holding windows that opened while their key's
	// limit was already reached, which a single Redis without persistence
	// cannot prevent, because a fault that lost the server's data came
	// after the acquisition of some of the windows still open (fencing
	// still rejects the old holder's writes once the new one has written).
	ExcusedOverlaps int
	// ExcusedRejections counts writes rejected inside their writer's
	// holding window for the same reason: a newer holder wrote after the
	// server forgot the old holder's lock.
	ExcusedRejections int
	// Linearizable is porcupine's verdict on the model of a server that
	// holds locks, semaphores and read-write locks, and a fenced store:
	// fences issued in increasing order, no more holders at once than the
	// key's limit (readers, or one writer, for a read-write lock), a
	// successful Release giving back what the server held, and writes
	// accepted if and only if their fence is at least the highest
	// accepted before.
	Linearizable porcupine.CheckResult
	// Violations describes everything that broke the checked properties.
	// It must be empty.
	Violations []string

	ops  []Op
	info porcupine.LinearizationInfo
}

// Err returns an error listing the violations, or nil.
func (r *Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	const show = 20
	v := r.Violations
	more := ""
	if len(v) > show {
		more = fmt.Sprintf("\n... and %d more", len(v)-show)
		v = v[:show]
	}
	return fmt.Errorf("%d violations:\n%s%s", len(r.Violations), strings.Join(v, "\n"), more)
}

// Summary returns the report's figures, one a line.
func (r *Report) Summary() string {
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	peaks := make([]string, 0, len(r.Peak))
	rwKeys := []string{}
	for k, n := range r.Peak {
		if r.ReadWrite[k] {
			peaks = append(peaks, fmt.Sprintf("%s %d (readers, or one writer)", k, n))
			rwKeys = append(rwKeys, k)
			continue
		}
		peaks = append(peaks, fmt.Sprintf("%s %d of %d", k, n, r.Limits[k]))
	}
	sort.Strings(peaks)
	sort.Strings(rwKeys)
	lines := [][2]string{
		{"operations recorded", fmt.Sprint(r.Ops)},
		{"obtain calls", fmt.Sprintf("%d (%d acquisitions, %d of them sets)", r.Obtains, r.Acquisitions, r.Sets)},
		{"release calls", fmt.Sprint(r.Releases)},
		{"most holders at once", strings.Join(peaks, ", ")},
		{"read-write keys", strings.Join(rwKeys, ", ")},
		{"fenced writes", fmt.Sprintf("%d (%d accepted, %d rejected)", r.Writes, r.Accepted, r.Rejected)},
		{"stale writes", fmt.Sprintf("%d (%d accepted before a newer holder wrote, %d rejected)",
			r.Stale, r.StaleAccepted, r.StaleRejected)},
		{"faults injected", fmt.Sprintf("%d (%s)", total, strings.Join(kinds, ", "))},
		{"excused after data loss", fmt.Sprintf("%d windows over the limit, %d writes rejected inside their window",
			r.ExcusedOverlaps, r.ExcusedRejections)},
		{"linearizability", string(r.Linearizable)},
		{"violations", fmt.Sprint(len(r.Violations))},
	}
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%-24s %s", l[0]+":", l[1])
	}
	return b.String()
}

// porcupineTimeout bounds the linearizability check; past it the verdict
// is Unknown, which is reported but is not a violation.
const porcupineTimeout = time.Minute

// CheckOps checks a history (single Redis server, no failover) for:
//
//   - a lock (or permit) returned as a success after its Deadline: a
//     holding window that ends before it starts;
//   - too many holding windows at once: more holders of a key that
//     believed their locks (or permits) valid at the same instant than
//     the key's limit (1 for a lock, n for a semaphore with n permits),
//     or, on a read-write lock, a write window open at an instant with
//     any other window, read or write (read windows alone may overlap),
//     unless a fault that lost the server's data lies between the
//     acquisition of one of the windows already open and the start of
//     the next; a set's window counts on each of its keys;
//   - fences out of order: an acquisition that returned before another
//     was called must have the lower fence (on each key, for a set;
//     calls without fencing are left out);
//   - the fenced store accepting a write whose fence is lower than one it
//     had accepted before (or rejecting one that is not);
//   - a holder's write rejected inside its own holding window, which
//     means a newer holder wrote while it still believed it held the
//     lock (again unless data was lost in between);
//
// and runs porcupine's linearizability checker on the acquisitions,
// releases, holding windows and writes against a model of the server and
// the store, as a second opinion.
func CheckOps(ops []Op) *Report {
	r := &Report{Ops: len(ops), Faults: make(map[string]int), Limits: make(map[string]int),
		ReadWrite: make(map[string]bool), Peak: make(map[string]int), ops: ops}
	var holds, obtains, releases, writes, losses []Op
	limit := func(op Op) {
		r.Limits[op.Key] = max(r.Limits[op.Key], op.Limit, 1)
		if op.Access != "" {
			r.ReadWrite[op.Key] = true
		}
	}
	for _, op := range ops {
		// A set's call is recorded once per key: count its first.
		once := len(op.Set) == 0 || op.Key == op.Set[0]
		switch op.Kind {
		case KindObtain:
			limit(op)
			if once {
				r.Obtains++
			}
			if op.Outcome == OutcomeOK {
				if once {
					r.Acquisitions++
					if len(op.Set) > 0 {
						r.Sets++
					}
				}
				obtains = append(obtains, op)
			}
		case KindRelease:
			if once {
				r.Releases++
			}
			releases = append(releases, op)
		case KindHold:
			limit(op)
			holds = append(holds, op)
		case KindWrite:
			r.Writes++
			if op.Outcome == OutcomeAccepted {
				r.Accepted++
			} else {
				r.Rejected++
			}
			writes = append(writes, op)
		case KindFault:
			r.Faults[op.Detail]++
			if op.LosesData {
				losses = append(losses, op)
			}
		}
	}
	lostBetween := func(from, to int64) bool {
		for _, f := range losses {
			if f.Return >= from && f.Call <= to {
				return true
			}
		}
		return false
	}
	byKey := func(list []Op) map[string][]Op {
		m := make(map[string][]Op)
		for _, op := range list {
			m[op.Key] = append(m[op.Key], op)
		}
		return m
	}

	// Holding windows. The most windows open at once are open at the
	// start of one of them: so at each start, count the earlier windows
	// still open, less those acquired before a loss of data that came
	// before this start. Too many are more than the limit; on a
	// read-write lock, more than one with a writer among them (a write
	// window counts as the whole limit, a read window as nothing).
	for key, hs := range byKey(holds) {
		limit := r.Limits[key]
		tooMany := func(ws []Op) bool { return len(ws) > limit }
		if r.ReadWrite[key] {
			tooMany = func(ws []Op) bool {
				return len(ws) > 1 && slices.ContainsFunc(ws, func(o Op) bool { return o.Access != AccessRead })
			}
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].Call < hs[j].Call })
		var open []Op // earlier windows that may still be open
		for _, h := range hs {
			if h.Call-h.Return > int64(lateReturnSlack) {
				// The Deadline had passed when the lock was returned,
				// by more than a goroutine can be held up between the
				// library's last look at it and the return.
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: %s's lock with fence %d was returned at %s, after its window had ended (%s) at %s",
					key, h.Holder, h.Fence, ms(h.Call), h.Outcome, ms(h.Return)))
			}
			open = slices.DeleteFunc(open, func(o Op) bool { return o.Return < h.Call })
			counted := []Op{h}
			for _, o := range open {
				if !lostBetween(o.ObtainCall, h.Call) {
					counted = append(counted, o)
				}
			}
			r.Peak[key] = max(r.Peak[key], len(counted))
			switch {
			case tooMany(counted):
				windows := make([]string, len(counted))
				for i, o := range counted {
					windows[i] = fmt.Sprintf("%s fence %d [%s, %s]", o.who(), o.Fence, ms(o.Call), ms(o.Return))
				}
				over := fmt.Sprintf("over its limit of %d", limit)
				if r.ReadWrite[key] {
					over = "a write window among them"
				}
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: %d holding windows overlap at %s, %s: %s",
					key, len(counted), ms(h.Call), over, strings.Join(windows, ", ")))
			case tooMany(append(slices.Clone(open), h)):
				r.ExcusedOverlaps++
			}
			open = append(open, h)
		}
	}

	// Fences in acquisition order: for each acquisition, every one that
	// returned before it was called has a lower fence. Calls without
	// fencing have none.
	fenced := slices.DeleteFunc(slices.Clone(obtains), func(op Op) bool { return op.Unfenced })
	for key, list := range byKey(fenced) {
		byReturn := slices.Clone(list)
		sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
		sort.Slice(list, func(i, j int) bool { return list[i].Call < list[j].Call })
		var best Op // the highest fence among those returned so far
		next := 0
		for _, op := range list {
			for next < len(byReturn) && byReturn[next].Return < op.Call {
				if byReturn[next].Fence > best.Fence {
					best = byReturn[next]
				}
				next++
			}
			if best.Holder != "" && op.Fence <= best.Fence {
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: fence %d of %s (obtain called at %s) is not above fence %d of %s, which returned at %s",
					key, op.Fence, op.who(), ms(op.Call), best.Fence, best.who(), ms(best.Return)))
			}
		}
	}

	// The store, replayed in its own order (its operations are timed
	// inside its lock, so they do not overlap).
	windows := make(map[string]Op) // by key, holder and fence
	for _, h := range holds {
		windows[holdID(h.Key, h.Holder, h.Fence)] = h
	}
	for key, ws := range byKey(writes) {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Call < ws[j].Call })
		var highest int64
		for _, w := range ws {
			accepted := w.Outcome == OutcomeAccepted
			switch {
			case accepted && w.Fence < highest:
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: the store accepted a write by %s with fence %d at %s after accepting fence %d",
					key, w.Holder, w.Fence, ms(w.Call), highest))
			case !accepted && w.Fence >= highest:
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: the store rejected a write by %s with fence %d at %s, not below the highest, %d",
					key, w.Holder, w.Fence, ms(w.Call), highest))
			}
			if accepted {
				highest = max(highest, w.Fence)
			}
			hold, ok := windows[holdID(w.held(), w.Holder, w.Fence)]
			switch {
			case !ok || w.Call > hold.Return:
				r.Stale++
				if accepted {
					r.StaleAccepted++
				} else {
					r.StaleRejected++
				}
			case !accepted && w.Return <= hold.Return && w.Call >= hold.Call && lostBetween(hold.ObtainCall, w.Return):
				r.ExcusedRejections++
			case !accepted && w.Return <= hold.Return && w.Call >= hold.Call:
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: a write by %s with fence %d at %s was rejected inside its holding window [%s, %s]: a newer holder wrote while it held the lock",
					key, w.Holder, w.Fence, ms(w.Call), ms(hold.Call), ms(hold.Return)))
			}
		}
	}

	r.Linearizable, r.info = checkLinearizable(obtains, holds, releases, writes, losses)
	if r.Linearizable == porcupine.Illegal {
		r.Violations = append(r.Violations,
			"porcupine: the history is not linearizable against the model of the server and the fenced store")
	}
	return r
}

// who names the holder of an obtain or a hold in a violation: its name,
// with the hold of a read-write lock it took, or the set it was part of.
func (op Op) who() string {
	s := op.Holder
	if op.Access != "" {
		s += " " + op.Access
	}
	if len(op.Set) > 0 {
		s += " (set " + strings.Join(op.Set, ", ") + ")"
	}
	return s
}

// held returns the key of the lock or semaphore a write was made under.
func (op Op) held() string {
	if op.Under != "" {
		return op.Under
	}
	return op.Key
}

func holdID(key, holder string, fence int64) string {
	return fmt.Sprintf("%q %q %d", key, holder, fence)
}

// ms formats a clock time in milliseconds since the origin.
// lateReturnSlack is how long after a lock's Deadline Obtain may return
// it without a violation: the library checks the Deadline just before it
// returns, and a goroutine can be held up between the two (the race
// detector, a loaded machine); a holder that must be exact compares the
// time with the Deadline before it acts. A soak under -race saw a lock
// returned 1µs after its Deadline; the bugs this looks for returned locks
// 165ms to 959ms late.
const lateReturnSlack = 10 * time.Millisecond

func ms(ns int64) string {
	return fmt.Sprintf("%.3fms", float64(ns)/1e6)
}

// The model, for porcupine, with one partition per key: what the server
// holds for a lock or a semaphore (the holders it counts, and the last
// fence it issued), and what the fenced store holds for a record (the
// highest fence it accepted). A lock's key is also its record.
//
// A holder joins when its acquisition takes effect, if fewer than the
// key's limit hold, and leaves when its successful Release does (which
// finds it there), or else at some point after its holding window ended
// (when its permit expired, or a Release that reported ErrNotHeld came
// after that), or when a fault that lost the server's data forgot it.
// An expiry is not an operation anyone records: the model leaves its time
// open, from the end of the window (before which the holder's TTL cannot
// have run out on the server, if its Deadline is right) to the end of the
// history, since a renewal delayed in the network can extend a permit on
// the server past the Deadline its holder knows.
//
// A read-write lock's hold joins the same way, but a writer only when
// nobody holds, and a reader only when no writer holds (any number of
// readers may); the model does not know of a waiting writer's intent,
// which only makes the server refuse readers the model would let in.
//
// What the model leaves out: an acquisition that failed may still have
// held a permit for a while (its reply was lost, or came too late and
// the call removed the permit again), which only makes the server refuse
// more than the model would; and a refused acquisition does not tell
// that the limit was reached at an instant of its call (ErrNotObtained is
// also what a call whose context ended reports, and permits that expired
// or were taken by failed calls are not in the model), so refusals are
// not checked.
type (
	resourceState struct {
		issued, accepted int64
		holders          []string // sorted: the holders the server counts
		writing          bool     // a read-write lock: one of holders is its writer
	}
	resourceInput struct {
		step   step
		holder string // the holder, or a fault's name
		id     string // the holding: holder and fence
		fence  int64
		limit  int
		access string // a read-write lock's hold: AccessRead or AccessWrite
		// unfenced: an acquisition without a fence, which issues none
		unfenced bool
	}
	step int
)

const (
	stepAcquire step = iota // a successful acquisition
	stepRelease             // a successful Release: the holding was there
	stepLeave               // the holding expired, or an unsuccessful Release
	stepForget              // the server lost its data
	stepWrite               // a write to the store; the output is whether it was accepted
)

var resourceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var keys []string
		var forgets []porcupine.Operation
		for _, op := range history {
			key := op.Metadata.(string)
			if op.Input.(resourceInput).step == stepForget {
				forgets = append(forgets, op)
				continue
			}
			if _, ok := byKey[key]; !ok {
				keys = append(keys, key)
			}
			byKey[key] = append(byKey[key], op)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, append(byKey[k], forgets...))
		}
		return parts
	},
	Init: func() any { return resourceState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(resourceState), input.(resourceInput)
		switch in.step {
		case stepAcquire:
			// Its fence is above every one issued before, and there was
			// room for it.
			room := len(s.holders) < in.limit
			switch in.access {
			case AccessRead:
				room = !s.writing
			case AccessWrite:
				room = len(s.holders) == 0
			}
			if (!in.unfenced && in.fence <= s.issued) || !room || slices.Contains(s.holders, in.id) {
				return false, s
			}
			holders := slices.Clone(s.holders)
			i, _ := slices.BinarySearch(holders, in.id)
			issued := in.fence
			if in.unfenced {
				issued = s.issued
			}
			return true, resourceState{issued: issued, accepted: s.accepted, holders: slices.Insert(holders, i, in.id),
				writing: s.writing || in.access == AccessWrite}
		case stepRelease, stepLeave:
			i, found := slices.BinarySearch(s.holders, in.id)
			if !found {
				return in.step == stepLeave, s
			}
			return true, resourceState{issued: s.issued, accepted: s.accepted,
				holders: slices.Delete(slices.Clone(s.holders), i, i+1), writing: s.writing && in.access != AccessWrite}
		case stepForget:
			return true, resourceState{issued: s.issued, accepted: s.accepted}
		}
		accepted := output.(bool)
		if in.fence >= s.accepted {
			return accepted, resourceState{issued: s.issued, accepted: in.fence, holders: s.holders, writing: s.writing}
		}
		return !accepted, s
	},
	Equal: func(a, b any) bool {
		x, y := a.(resourceState), b.(resourceState)
		return x.issued == y.issued && x.accepted == y.accepted && x.writing == y.writing && slices.Equal(x.holders, y.holders)
	},
	DescribeOperation: func(input, output any) string {
		in := input.(resourceInput)
		switch in.step {
		case stepAcquire:
			if in.access != "" {
				return fmt.Sprintf("%s obtains the %s hold with fence %d", in.holder, in.access, in.fence)
			}
			if in.unfenced {
				return fmt.Sprintf("%s obtains, without a fence (limit %d)", in.holder, in.limit)
			}
			return fmt.Sprintf("%s obtains fence %d (limit %d)", in.holder, in.fence, in.limit)
		case stepRelease:
			return fmt.Sprintf("%s releases fence %d", in.holder, in.fence)
		case stepLeave:
			return fmt.Sprintf("fence %d of %s expires", in.fence, in.holder)
		case stepForget:
			return in.holder + ": the server forgets"
		}
		verdict := "rejected"
		if output.(bool) {
			verdict = "accepted"
		}
		return fmt.Sprintf("%s writes with fence %d: %s", in.holder, in.fence, verdict)
	},
	DescribeState: func(state any) string {
		s := state.(resourceState)
		writer := ""
		if s.writing {
			writer = " (one writer)"
		}
		return fmt.Sprintf("issued %d, accepted %d, held by [%s]%s", s.issued, s.accepted, strings.Join(s.holders, "; "), writer)
	},
	DescribeOperationMetadata: func(info any) string { return fmt.Sprintf("key %v", info) },
}

// clientIDs numbers holders for porcupine's visualisation.
type clientIDs map[string]int

func (c clientIDs) of(holder string) int {
	id, ok := c[holder]
	if !ok {
		id = len(c)
		c[holder] = id
	}
	return id
}

// checkLinearizable runs porcupine on the operations of the model:
// acquisitions, releases (or the expiry after a window), faults that
// lost data, and writes.
func checkLinearizable(obtains, holds, releases, writes, losses []Op) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	ids := clientIDs{}
	var history []porcupine.Operation
	var end int64 // the end of the history
	for _, list := range [][]Op{obtains, holds, releases, writes, losses} {
		for _, op := range list {
			end = max(end, op.Return)
		}
	}
	label := func(holder string, fence int64) string { return fmt.Sprintf("%s fence %d", holder, fence) }
	// Each holding leaves once: by its successful Release, or after its
	// window and before an unsuccessful Release (or the end).
	windows := make(map[string]Op)
	for _, h := range holds {
		windows[holdID(h.Key, h.Holder, h.Fence)] = h
	}
	released := make(map[string]Op)
	for _, op := range releases {
		id := holdID(op.Key, op.Holder, op.Fence)
		if _, ok := released[id]; !ok {
			released[id] = op
		}
	}
	for _, op := range obtains {
		id := holdID(op.Key, op.Holder, op.Fence)
		// The call's own limit: a call with a smaller limit than others
		// of the key is refused while as many as it allows hold.
		in := resourceInput{holder: op.Holder, id: label(op.Holder, op.Fence), fence: op.Fence, limit: max(op.Limit, 1), access: op.Access,
			unfenced: op.Unfenced}
		in.step = stepAcquire
		history = append(history, porcupine.Operation{
			ClientId: ids.of(op.Holder), Input: in,
			Call: op.Call, Return: op.Return, Metadata: op.Key,
		})
		leave := porcupine.Operation{ClientId: ids.of(op.Holder), Call: op.Return, Return: end, Metadata: op.Key}
		if w, ok := windows[id]; ok {
			leave.Call = w.Return
		}
		rel, ok := released[id]
		switch {
		case ok && rel.Outcome == OutcomeOK:
			in.step = stepRelease
			leave.Call, leave.Return = rel.Call, rel.Return
		case ok && rel.Outcome == OutcomeNotHeld:
			in.step = stepLeave
			leave.Return = max(leave.Call, rel.Return)
		default:
			in.step = stepLeave
		}
		if in.step == stepLeave {
			// Not the holder's own doing: on a row of its own.
			leave.ClientId = ids.of("expiries of " + op.Holder)
		}
		leave.Input = in
		history = append(history, leave)
	}
	for _, op := range losses {
		history = append(history, porcupine.Operation{
			ClientId: ids.of("faults"),
			Input:    resourceInput{step: stepForget, holder: op.Detail},
			Call:     op.Call, Return: op.Return, Metadata: "",
		})
	}
	for _, op := range writes {
		history = append(history, porcupine.Operation{
			ClientId: ids.of(op.Holder),
			Input:    resourceInput{step: stepWrite, holder: op.Holder, fence: op.Fence},
			Output:   op.Outcome == OutcomeAccepted,
			Call:     op.Call, Return: op.Return, Metadata: op.Key,
		})
	}
	return porcupine.CheckOperationsVerbose(resourceModel, history, porcupineTimeout)
}

// Visualize writes porcupine's HTML visualisation of the checked history
// to path: the acquisitions and writes of each key, with the holding
// windows and the faults as annotations.
func (r *Report) Visualize(path string) error {
	if r.ops == nil {
		return errors.New("faults: the report has no history")
	}
	var notes []porcupine.Annotation
	for _, op := range r.ops {
		switch op.Kind {
		case KindHold:
			notes = append(notes, porcupine.Annotation{
				Tag:             "holds " + op.Key,
				Start:           op.Call,
				End:             op.Return,
				Description:     fmt.Sprintf("%s fence %d", op.who(), op.Fence),
				Details:         fmt.Sprintf("believed valid from %s to %s, ended by %s", ms(op.Call), ms(op.Return), op.Outcome),
				BackgroundColor: "#d7ecd9",
			})
		case KindFault:
			notes = append(notes, porcupine.Annotation{
				Tag:             "faults",
				Start:           op.Call,
				End:             op.Return,
				Description:     op.Detail,
				Details:         fmt.Sprintf("%s from %s to %s", op.Detail, ms(op.Call), ms(op.Return)),
				BackgroundColor: "#f6d6d6",
			})
		}
	}
	r.info.AddAnnotations(notes)
	return porcupine.VisualizePath(resourceModel, r.info, path)
}
