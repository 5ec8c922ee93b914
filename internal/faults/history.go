//go:build linux

package faults

import (
	"encoding/json"
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
