//go:build linux

package faults_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
)

// goodHistory is a clean handover on key "k": A holds fence 10 and
// writes, its window ends, B obtains fence 11 and writes, and A, paused,
// writes late and is rejected.
func goodHistory() []faults.Op {
	return []faults.Op{
		{Kind: faults.KindObtain, Key: "k", Holder: "A", Fence: 10, Call: 0, Return: 1, Outcome: faults.OutcomeOK},
		{Kind: faults.KindWrite, Key: "k", Holder: "A", Fence: 10, Call: 50, Return: 51, Outcome: faults.OutcomeAccepted},
		{Kind: faults.KindHold, Key: "k", Holder: "A", Fence: 10, ObtainCall: 0, Call: 1, Return: 100, Outcome: "deadline"},
		{Kind: faults.KindObtain, Key: "k", Holder: "B", Call: 90, Return: 91, Outcome: faults.OutcomeNotObtained},
		{Kind: faults.KindObtain, Key: "k", Holder: "B", Fence: 11, Call: 120, Return: 150, Outcome: faults.OutcomeOK},
		{Kind: faults.KindWrite, Key: "k", Holder: "B", Fence: 11, Call: 200, Return: 201, Outcome: faults.OutcomeAccepted},
		{Kind: faults.KindWrite, Key: "k", Holder: "A", Fence: 10, Call: 250, Return: 251, Outcome: faults.OutcomeRejected},
		{Kind: faults.KindHold, Key: "k", Holder: "B", Fence: 11, ObtainCall: 120, Call: 150, Return: 300, Outcome: "released"},
		{Kind: faults.KindRelease, Key: "k", Holder: "B", Call: 300, Return: 310, Outcome: faults.OutcomeOK},
		{Kind: faults.KindFault, Detail: "pause", Call: 60, Return: 240},
	}
}

func TestCheckerPassesGoodHistory(t *testing.T) {
	rep := faults.CheckOps(goodHistory())
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 3, rep.Obtains)
	require.Equal(t, 2, rep.Acquisitions)
	require.Equal(t, 3, rep.Writes)
	require.Equal(t, 1, rep.Stale)
	require.Equal(t, 1, rep.StaleRejected)
	require.Equal(t, map[string]int{"pause": 1}, rep.Faults)
	require.Contains(t, rep.Summary(), "violations:              0")
}

// edit returns goodHistory changed by f.
func edit(f func(ops []faults.Op) []faults.Op) []faults.Op {
	return f(goodHistory())
}

// find returns the index of the first op of kind by holder.
func find(ops []faults.Op, kind faults.Kind, holder string, outcome string) int {
	return slices.IndexFunc(ops, func(op faults.Op) bool {
		return op.Kind == kind && op.Holder == holder && (outcome == "" || op.Outcome == outcome)
	})
}

// The checker must catch each kind of bad history: otherwise a run could
// pass by checking nothing.
func TestCheckerCatchesBadHistories(t *testing.T) {
	cases := []struct {
		name    string
		ops     []faults.Op
		want    string // in the violations
		illegal bool   // porcupine must find it too
	}{
		{
			name: "overlapping windows",
			ops: edit(func(ops []faults.Op) []faults.Op {
				ops[find(ops, faults.KindHold, "A", "")].Return = 160 // past B's start
				return ops
			}),
			want: "holding windows overlap",
		},
		{
			name: "fence not increasing",
			ops: edit(func(ops []faults.Op) []faults.Op {
				for i := range ops {
					if ops[i].Holder == "B" && ops[i].Fence == 11 {
						ops[i].Fence = 10
					}
				}
				return ops
			}),
			want:    "is not above fence 10",
			illegal: true,
		},
		{
			name: "stale write accepted",
			ops: edit(func(ops []faults.Op) []faults.Op {
				ops[find(ops, faults.KindWrite, "A", faults.OutcomeRejected)].Outcome = faults.OutcomeAccepted
				return ops
			}),
			want:    "accepted a write by A with fence 10",
			illegal: true,
		},
		{
			name: "current write rejected",
			ops: edit(func(ops []faults.Op) []faults.Op {
				ops[find(ops, faults.KindWrite, "B", "")].Outcome = faults.OutcomeRejected
				return ops
			}),
			want:    "rejected a write by B with fence 11",
			illegal: true,
		},
		{
			name: "holder rejected inside its window",
			ops: edit(func(ops []faults.Op) []faults.Op {
				// B writes before its window opens (it is an intruder),
				// and A, still inside its window, is then rejected.
				return append(ops,
					faults.Op{Kind: faults.KindWrite, Key: "k", Holder: "B", Fence: 11, Call: 60, Return: 61, Outcome: faults.OutcomeAccepted},
					faults.Op{Kind: faults.KindWrite, Key: "k", Holder: "A", Fence: 10, Call: 70, Return: 71, Outcome: faults.OutcomeRejected})
			}),
			want: "rejected inside its holding window",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := faults.CheckOps(tc.ops)
			err := rep.Err()
			require.Error(t, err, "the checker passed a bad history")
			require.ErrorContains(t, err, tc.want)
			if tc.illegal {
				require.Equal(t, porcupine.Illegal, rep.Linearizable)
			}

			// The failing history can be looked at.
			path := filepath.Join(t.TempDir(), "history.html")
			require.NoError(t, rep.Visualize(path))
			html, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, strings.Contains(string(html), "<html") && len(html) > 1000, "no visualisation written")
		})
	}
}

func TestCheckerExcusesOverlapAcrossDataLoss(t *testing.T) {
	ops := edit(func(ops []faults.Op) []faults.Op {
		ops[find(ops, faults.KindHold, "A", "")].Return = 160
		return append(ops, faults.Op{Kind: faults.KindFault, Detail: "redis-restart", Call: 80, Return: 85, LosesData: true})
	})
	rep := faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, 1, rep.ExcusedOverlaps)

	// A loss before the first holder's acquisition excuses nothing.
	ops = edit(func(ops []faults.Op) []faults.Op {
		ops[find(ops, faults.KindHold, "A", "")].Return = 160
		return append(ops, faults.Op{Kind: faults.KindFault, Detail: "redis-restart", Call: -20, Return: -10, LosesData: true})
	})
	require.ErrorContains(t, faults.CheckOps(ops).Err(), "holding windows overlap")
}

func TestHistoryRecordsOnOneClock(t *testing.T) {
	clock := faults.NewClock()
	start := time.Now()
	time.Sleep(5 * time.Millisecond)
	now := clock.Now()
	require.Greater(t, now, clock.At(start))
	// Another process's clock with the same base agrees to within a
	// fraction of a millisecond.
	other := faults.ClockFrom(clock.Base())
	require.InDelta(t, clock.Now(), other.Now(), float64(time.Millisecond))

	h := new(faults.History)
	h.Record(faults.Op{Kind: faults.KindFault, Detail: "x", Call: 1, Return: 2})
	path := filepath.Join(t.TempDir(), "h.jsonl")
	require.NoError(t, h.WriteJSON(path))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, `{"kind":"fault","call":1,"return":2,"detail":"x"}`+"\n", string(data))
}
