//go:build linux

package faults_test

import (
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
)

// setOps records one call of a set of locks as the tracker does: one op
// of each kind per key, with that key's fence, over the same times.
func setOps(holder string, fences map[string]int64, call, ret, end int64) []faults.Op {
	set := make([]string, 0, len(fences))
	for k := range fences {
		set = append(set, k)
	}
	slices.Sort(set)
	var ops []faults.Op
	for _, k := range set {
		f := fences[k]
		ops = append(ops,
			faults.Op{Kind: faults.KindObtain, Key: k, Set: set, Holder: holder, Fence: f, Call: call, Return: ret, Outcome: faults.OutcomeOK},
			faults.Op{Kind: faults.KindWrite, Key: k, Holder: holder, Fence: f, Call: ret + 10, Return: ret + 11, Outcome: faults.OutcomeAccepted},
			faults.Op{Kind: faults.KindHold, Key: k, Set: set, Holder: holder, Fence: f, ObtainCall: call, Call: ret, Return: end, Outcome: "released"},
			faults.Op{Kind: faults.KindRelease, Key: k, Set: set, Holder: holder, Fence: f, Call: end, Return: end + 1, Outcome: faults.OutcomeOK})
	}
	return ops
}

// singleOps records one Obtain of key, its write, window and release.
func singleOps(holder, key string, fence, call, ret, end int64) []faults.Op {
	return []faults.Op{
		{Kind: faults.KindObtain, Key: key, Holder: holder, Fence: fence, Call: call, Return: ret, Outcome: faults.OutcomeOK},
		{Kind: faults.KindWrite, Key: key, Holder: holder, Fence: fence, Call: ret + 10, Return: ret + 11, Outcome: faults.OutcomeAccepted},
		{Kind: faults.KindHold, Key: key, Holder: holder, Fence: fence, ObtainCall: call, Call: ret, Return: end, Outcome: "released"},
		{Kind: faults.KindRelease, Key: key, Holder: holder, Fence: fence, Call: end, Return: end + 1, Outcome: faults.OutcomeOK},
	}
}

// setHistory is sets and single keys taking turns on keys a, b and c: X
// holds b and Y holds c; set S of a and b waits for X and gets both; set
// T of b and c waits for S and gets both; a set call that gave up is
// recorded too.
func setHistory() []faults.Op {
	var ops []faults.Op
	ops = append(ops, singleOps("X", "b", 10, 0, 1, 100)...)
	ops = append(ops, singleOps("Y", "c", 3, 10, 11, 150)...)
	ops = append(ops, setOps("S", map[string]int64{"a": 5, "b": 11}, 90, 120, 300)...)
	ops = append(ops, setOps("T", map[string]int64{"b": 12, "c": 7}, 200, 320, 500)...)
	for _, k := range []string{"a", "c"} {
		ops = append(ops, faults.Op{Kind: faults.KindObtain, Key: k, Set: []string{"a", "c"}, Holder: "U",
			Call: 250, Return: 260, Outcome: faults.OutcomeNotObtained})
	}
	return ops
}

// The checker counts a set's call once, and checks its window on each of
// its keys against the other windows of that key.
func TestCheckerPassesSets(t *testing.T) {
	rep := faults.CheckOps(setHistory())
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 5, rep.Obtains)
	require.Equal(t, 4, rep.Acquisitions)
	require.Equal(t, 2, rep.Sets)
	require.Equal(t, 4, rep.Releases)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, rep.Peak)
}

// An overlap that involves a set, on any of its keys, against a single
// key's window or another set's, is a violation, and so is a set's fence
// on a key that is not above the fences of that key before it.
func TestCheckerCatchesBadSetHistories(t *testing.T) {
	// moveEnd ends holder's window (and its release) on key at end.
	moveEnd := func(ops []faults.Op, holder, key string, end int64) []faults.Op {
		for i := range ops {
			op := &ops[i]
			if op.Holder != holder || op.Key != key {
				continue
			}
			switch op.Kind {
			case faults.KindHold:
				op.Return = end
			case faults.KindRelease:
				op.Call, op.Return = end, end+1
			}
		}
		return ops
	}
	cases := []struct {
		name string
		ops  []faults.Op
		want string
	}{
		{
			name: "single key holder into a set's window",
			ops:  moveEnd(setHistory(), "X", "b", 130),
			want: `key "b": 2 holding windows overlap at 0.000ms, over its limit of 1: S (set a, b) fence 11`,
		},
		{
			name: "set into a single key holder's window",
			ops: func() []faults.Op {
				// Y holds c until after T, a set, got c.
				return moveEnd(setHistory(), "Y", "c", 330)
			}(),
			want: `key "c": 2 holding windows overlap at 0.000ms, over its limit of 1: T (set b, c) fence 7`,
		},
		{
			name: "two sets on their shared key",
			ops: func() []faults.Op {
				ops := setHistory()
				// S's window stays open past T's start, on both its
				// keys, but only b is T's too.
				ops = moveEnd(ops, "S", "a", 330)
				return moveEnd(ops, "S", "b", 330)
			}(),
			want: `key "b": 2 holding windows overlap at 0.000ms, over its limit of 1: T (set b, c) fence 12 [0.000ms, 0.001ms], S (set a, b) fence 11`,
		},
		{
			name: "a set's fence not above a single key's",
			ops: func() []faults.Op {
				ops := setHistory()
				for i := range ops {
					if ops[i].Holder == "S" && ops[i].Key == "b" {
						ops[i].Fence = 10
					}
				}
				return ops
			}(),
			want: `key "b": fence 10 of S (set a, b) (obtain called at 0.000ms) is not above fence 10 of X`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := faults.CheckOps(tc.ops)
			require.ErrorContains(t, rep.Err(), tc.want)
			require.Equal(t, porcupine.Illegal, rep.Linearizable)
			if tc.name == "two sets on their shared key" {
				// Only the shared key: S's windows on a overlap nothing.
				require.NotContains(t, rep.Err().Error(), `key "a"`)
				require.Equal(t, 2, rep.Peak["b"])
				require.Equal(t, 1, rep.Peak["a"])
			}
		})
	}
}

// Calls without fencing record fence 0: the fence order does not apply to
// them, but their windows are checked as the others.
func TestCheckerUnfencedSets(t *testing.T) {
	unfenced := func(ops []faults.Op) []faults.Op {
		ops = slices.DeleteFunc(ops, func(op faults.Op) bool { return op.Kind == faults.KindWrite })
		for i := range ops {
			ops[i].Fence, ops[i].Unfenced = 0, true
		}
		return ops
	}
	var ops []faults.Op
	ops = append(ops, setOps("S.1", map[string]int64{"a": 0, "b": 0}, 0, 1, 100)...)
	ops = append(ops, singleOps("X.1", "b", 0, 50, 110, 200)...)
	ops = append(ops, setOps("S.2", map[string]int64{"a": 0, "b": 0}, 150, 210, 300)...)
	ops = unfenced(ops)
	rep := faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 2, rep.Sets)

	// X's window into S.2's.
	for i := range ops {
		if ops[i].Holder == "X.1" && ops[i].Kind == faults.KindHold {
			ops[i].Return = 250
		}
		if ops[i].Holder == "X.1" && ops[i].Kind == faults.KindRelease {
			ops[i].Call, ops[i].Return = 250, 251
		}
	}
	rep = faults.CheckOps(ops)
	require.ErrorContains(t, rep.Err(), `key "b": 2 holding windows overlap`)
	require.Equal(t, porcupine.Illegal, rep.Linearizable)

	// Fence 0 with fencing is still out of order.
	ops = setHistory()
	for i := range ops {
		if ops[i].Holder == "T" {
			ops[i].Fence = 0
		}
	}
	require.ErrorContains(t, faults.CheckOps(ops).Err(), "fence 0 of T (set b, c)")
}
