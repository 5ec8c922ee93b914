//go:build linux

package faults

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

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
