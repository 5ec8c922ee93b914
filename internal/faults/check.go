//go:build linux

package faults

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

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
