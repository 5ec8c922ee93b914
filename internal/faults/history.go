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
	// KindObtain is one Obtain call; Fence is set when it succeeded.
	KindObtain Kind = "obtain"
	// KindRelease is one Release call.
	KindRelease Kind = "release"
	// KindHold is the window in which a holder believed its lock valid:
	// Call is when Obtain returned the lock, Return when the window ended
	// (the earliest of Release being called, the lease context ending,
	// and the lock's Deadline), and ObtainCall when Obtain was called.
	KindHold Kind = "hold"
	// KindWrite is one write to the fenced Store, timed inside the store.
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
	Obtains      int // Obtain calls
	Acquisitions int // successful Obtain calls
	Releases     int // Release calls
	Writes       int // writes to the fenced store
	Accepted     int // writes the store accepted
	Rejected     int // writes the store rejected
	// Stale writes are those that reached the store after their writer's
	// holding window had ended (it was paused, or ignored its lease).
	Stale, StaleAccepted, StaleRejected int
	// Faults counts the injected faults by kind.
	Faults map[string]int
	// ExcusedOverlaps counts holding windows that overlapped across a
	// fault that lost the server's data, which a single Redis without
	// persistence cannot prevent (fencing still rejects the old holder's
	// writes once the new one has written).
	ExcusedOverlaps int
	// ExcusedRejections counts writes rejected inside their writer's
	// holding window for the same reason: a newer holder wrote after the
	// server forgot the old holder's lock.
	ExcusedRejections int
	// Linearizable is porcupine's verdict on the fenced-resource model:
	// fences issued in increasing order, writes accepted if and only if
	// their fence is at least the highest accepted before.
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
	lines := [][2]string{
		{"operations recorded", fmt.Sprint(r.Ops)},
		{"obtain calls", fmt.Sprintf("%d (%d acquisitions)", r.Obtains, r.Acquisitions)},
		{"release calls", fmt.Sprint(r.Releases)},
		{"fenced writes", fmt.Sprintf("%d (%d accepted, %d rejected)", r.Writes, r.Accepted, r.Rejected)},
		{"stale writes", fmt.Sprintf("%d (%d accepted before a newer holder wrote, %d rejected)",
			r.Stale, r.StaleAccepted, r.StaleRejected)},
		{"faults injected", fmt.Sprintf("%d (%s)", total, strings.Join(kinds, ", "))},
		{"excused after data loss", fmt.Sprintf("%d overlapping windows, %d writes rejected inside their window",
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
//   - overlapping holding windows: two holders of a key that believed
//     their locks valid at the same instant, unless a fault that lost
//     the server's data lies between the first acquisition and the
//     second;
//   - fences out of order: an acquisition that returned before another
//     was called must have the lower fence;
//   - the fenced store accepting a write whose fence is lower than one it
//     had accepted before (or rejecting one that is not);
//   - a holder's write rejected inside its own holding window, which
//     means a newer holder wrote while it still believed it held the
//     lock (again unless data was lost in between);
//
// and runs porcupine's linearizability checker on the acquisitions and
// writes against the fenced-resource model, as a second opinion.
func CheckOps(ops []Op) *Report {
	r := &Report{Ops: len(ops), Faults: make(map[string]int), ops: ops}
	var holds, obtains, writes, losses []Op
	for _, op := range ops {
		switch op.Kind {
		case KindObtain:
			r.Obtains++
			if op.Outcome == OutcomeOK {
				r.Acquisitions++
				obtains = append(obtains, op)
			}
		case KindRelease:
			r.Releases++
		case KindHold:
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

	// Holding windows.
	for key, hs := range byKey(holds) {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Call < hs[j].Call })
		for i := range hs {
			for j := i + 1; j < len(hs) && hs[j].Call <= hs[i].Return; j++ {
				if lostBetween(hs[i].ObtainCall, hs[j].Call) {
					r.ExcusedOverlaps++
					continue
				}
				r.Violations = append(r.Violations, fmt.Sprintf(
					"key %q: holding windows overlap: %s fence %d [%s, %s] and %s fence %d [%s, %s]",
					key, hs[i].Holder, hs[i].Fence, ms(hs[i].Call), ms(hs[i].Return),
					hs[j].Holder, hs[j].Fence, ms(hs[j].Call), ms(hs[j].Return)))
			}
		}
	}

	// Fences in acquisition order: for each acquisition, every one that
	// returned before it was called has a lower fence.
	for key, list := range byKey(obtains) {
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
					key, op.Fence, op.Holder, ms(op.Call), best.Fence, best.Holder, ms(best.Return)))
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
			hold, ok := windows[holdID(w.Key, w.Holder, w.Fence)]
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

	r.Linearizable, r.info = checkLinearizable(obtains, writes)
	if r.Linearizable == porcupine.Illegal {
		r.Violations = append(r.Violations,
			"porcupine: the acquisitions and writes are not linearizable against the fenced-resource model")
	}
	return r
}

func holdID(key, holder string, fence int64) string {
	return fmt.Sprintf("%q %q %d", key, holder, fence)
}

// ms formats a clock time in milliseconds since the origin.
func ms(ns int64) string {
	return fmt.Sprintf("%.3fms", float64(ns)/1e6)
}

// The fenced-resource model, for porcupine: one partition per key.
type (
	resourceState struct{ issued, accepted int64 }
	resourceInput struct {
		write  bool
		holder string
		fence  int64
	}
)

var resourceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var keys []string
		for _, op := range history {
			key := op.Metadata.(string)
			if _, ok := byKey[key]; !ok {
				keys = append(keys, key)
			}
			byKey[key] = append(byKey[key], op)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return resourceState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(resourceState), input.(resourceInput)
		if !in.write {
			// An acquisition: its fence is above every one issued before.
			if in.fence <= s.issued {
				return false, s
			}
			return true, resourceState{issued: in.fence, accepted: s.accepted}
		}
		accepted := output.(bool)
		if in.fence >= s.accepted {
			return accepted, resourceState{issued: s.issued, accepted: in.fence}
		}
		return !accepted, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(resourceInput)
		if !in.write {
			return fmt.Sprintf("%s obtains fence %d", in.holder, in.fence)
		}
		verdict := "rejected"
		if output.(bool) {
			verdict = "accepted"
		}
		return fmt.Sprintf("%s writes with fence %d: %s", in.holder, in.fence, verdict)
	},
	DescribeState: func(state any) string {
		s := state.(resourceState)
		return fmt.Sprintf("issued %d, accepted %d", s.issued, s.accepted)
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

func checkLinearizable(obtains, writes []Op) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	ids := clientIDs{}
	var history []porcupine.Operation
	for _, op := range obtains {
		history = append(history, porcupine.Operation{
			ClientId: ids.of(op.Holder),
			Input:    resourceInput{holder: op.Holder, fence: op.Fence},
			Call:     op.Call, Return: op.Return, Metadata: op.Key,
		})
	}
	for _, op := range writes {
		history = append(history, porcupine.Operation{
			ClientId: ids.of(op.Holder),
			Input:    resourceInput{write: true, holder: op.Holder, fence: op.Fence},
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
				Description:     fmt.Sprintf("%s fence %d", op.Holder, op.Fence),
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
