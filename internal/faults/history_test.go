//go:build linux

package faults_test

import (
	"fmt"
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
		{Kind: faults.KindRelease, Key: "k", Holder: "B", Fence: 11, Call: 300, Return: 310, Outcome: faults.OutcomeOK},
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
			want:    "holding windows overlap",
			illegal: true,
		},
		{
			name: "returned after its Deadline",
			ops: edit(func(ops []faults.Op) []faults.Op {
				i := find(ops, faults.KindHold, "B", "")
				ops[i].Return, ops[i].Outcome = ops[i].Call-int64(20*time.Millisecond), "deadline"
				return ops
			}),
			want: `B's lock with fence 11 was returned at 0.000ms, after its window had ended (deadline)`,
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
	// fraction of a millisecond (the error of the two readings that set
	// its offset): ours, read between two readings of it, lies between
	// them give or take that, however long this goroutine waits for a
	// core in between.
	other := faults.ClockFrom(clock.Base())
	before := other.Now()
	ours := clock.Now()
	after := other.Now()
	const agree = int64(time.Millisecond)
	require.True(t, before-agree <= ours && ours <= after+agree, "%d not within 1ms of [%d, %d]", ours, before, after)

	h := new(faults.History)
	h.Record(faults.Op{Kind: faults.KindFault, Detail: "x", Call: 1, Return: 2})
	path := filepath.Join(t.TempDir(), "h.jsonl")
	require.NoError(t, h.WriteJSON(path))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, `{"kind":"fault","call":1,"return":2,"detail":"x"}`+"\n", string(data))
}

// permitHistory is n holders of permits of semaphore "s" with limit: holder
// i acquires fence 100+i at 10i, and each holds and writes to a job record
// of its own until it releases, from 1000 on. All n windows are open from
// the last acquisition to the first release.
func permitHistory(limit, n int) []faults.Op {
	var ops []faults.Op
	for i := range n {
		holder, fence, at := fmt.Sprintf("H%d", i), int64(100+i), int64(10*i)
		job := fmt.Sprintf("s/job-%d", i)
		ops = append(ops,
			faults.Op{Kind: faults.KindObtain, Key: "s", Limit: limit, Holder: holder, Fence: fence, Call: at, Return: at + 1, Outcome: faults.OutcomeOK},
			faults.Op{Kind: faults.KindWrite, Key: job, Under: "s", Holder: holder, Fence: fence, Call: 500 + at, Return: 501 + at, Outcome: faults.OutcomeAccepted},
			faults.Op{Kind: faults.KindHold, Key: "s", Limit: limit, Holder: holder, Fence: fence, ObtainCall: at, Call: at + 1, Return: 1000 + at, Outcome: "released"},
			faults.Op{Kind: faults.KindRelease, Key: "s", Holder: holder, Fence: fence, Call: 1000 + at, Return: 1001 + at, Outcome: faults.OutcomeOK})
	}
	return ops
}

// The counting check: N holders of a semaphore with N permits may believe
// at once, N+1 may not; for a lock (no limit recorded), N is 1. Porcupine,
// whose model counts the holders the server holds, agrees.
func TestCheckerCountsHolders(t *testing.T) {
	for _, limit := range []int{0, 1, 2, 3} {
		n := max(limit, 1)
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			rep := faults.CheckOps(permitHistory(limit, n))
			require.NoError(t, rep.Err())
			require.Equal(t, porcupine.Ok, rep.Linearizable)
			require.Equal(t, n, rep.Peak["s"], "the most holders at once")
			require.Equal(t, n, rep.Limits["s"])

			rep = faults.CheckOps(permitHistory(limit, n+1))
			require.ErrorContains(t, rep.Err(), fmt.Sprintf("%d holding windows overlap at 0.000ms, over its limit of %d", n+1, n))
			require.Equal(t, porcupine.Illegal, rep.Linearizable)
			require.Equal(t, n+1, rep.Peak["s"])
		})
	}
}

// Holders that come and go, never more than the limit at once, pass
// however many there are in all.
func TestCheckerPassesRotatingHolders(t *testing.T) {
	const limit = 3
	var ops []faults.Op
	for i := range 4 * limit {
		holder, fence, at := fmt.Sprintf("H%d", i), int64(100+i), int64(100*i)
		end := at + 100*limit - 50 // before holder i+limit acquires
		ops = append(ops,
			faults.Op{Kind: faults.KindObtain, Key: "s", Limit: limit, Holder: holder, Fence: fence, Call: at, Return: at + 1, Outcome: faults.OutcomeOK},
			faults.Op{Kind: faults.KindHold, Key: "s", Limit: limit, Holder: holder, Fence: fence, ObtainCall: at, Call: at + 1, Return: end, Outcome: "released"},
			faults.Op{Kind: faults.KindRelease, Key: "s", Holder: holder, Fence: fence, Call: end, Return: end + 1, Outcome: faults.OutcomeOK})
	}
	rep := faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, limit, rep.Peak["s"])

	// One window held a little longer, into the next holder's start,
	// makes limit+1.
	ops[2*3+1].Return = 100*(2+limit) + 10
	ops[2*3+2].Call = 100*(2+limit) + 10
	ops[2*3+2].Return = 100*(2+limit) + 11
	rep = faults.CheckOps(ops)
	require.ErrorContains(t, rep.Err(), "4 holding windows overlap at 0.001ms, over its limit of 3: H5 fence 105")
	require.Equal(t, porcupine.Illegal, rep.Linearizable)
}

// A restart that loses the server's data lets a full semaphore's permits
// be taken again while their old holders still believe: excused, as for
// a lock, and linearizable, since the model's server forgets its holders.
func TestCheckerExcusesPermitsAcrossDataLoss(t *testing.T) {
	ops := permitHistory(2, 2)
	for i := range 2 {
		holder, fence, at := fmt.Sprintf("N%d", i), int64(200+i), int64(100+10*i)
		ops = append(ops,
			faults.Op{Kind: faults.KindObtain, Key: "s", Limit: 2, Holder: holder, Fence: fence, Call: at, Return: at + 1, Outcome: faults.OutcomeOK},
			faults.Op{Kind: faults.KindHold, Key: "s", Limit: 2, Holder: holder, Fence: fence, ObtainCall: at, Call: at + 1, Return: 1500, Outcome: "released"})
	}
	restart := faults.Op{Kind: faults.KindFault, Detail: "redis-restart", Call: 50, Return: 60, LosesData: true}
	// The old holders' releases find nothing.
	for i := range ops {
		if ops[i].Kind == faults.KindRelease {
			ops[i].Outcome = faults.OutcomeNotHeld
		}
	}
	rep := faults.CheckOps(append(ops, restart))
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 2, rep.ExcusedOverlaps)
	require.Equal(t, 2, rep.Peak["s"])

	// Without the restart, four at once.
	rep = faults.CheckOps(ops)
	require.ErrorContains(t, rep.Err(), "4 holding windows overlap")
	require.Equal(t, porcupine.Illegal, rep.Linearizable)
}

// What porcupine sees that the windows do not: a holder whose window ended
// at its Deadline but whose Release then succeeded was still counted by
// the server, so a third holder of two permits in the meantime means the
// server gave out three.
func TestCheckerCountsWhatTheServerHeld(t *testing.T) {
	ops := permitHistory(2, 2)
	i := find(ops, faults.KindHold, "H0", "")
	ops[i].Return, ops[i].Outcome = 600, "deadline"
	ops = append(ops,
		faults.Op{Kind: faults.KindObtain, Key: "s", Limit: 2, Holder: "late", Fence: 300, Call: 700, Return: 701, Outcome: faults.OutcomeOK},
		faults.Op{Kind: faults.KindHold, Key: "s", Limit: 2, Holder: "late", Fence: 300, ObtainCall: 700, Call: 701, Return: 800, Outcome: "released"})
	rep := faults.CheckOps(ops)
	require.Equal(t, 2, rep.Peak["s"], "the windows never overlap three at once")
	require.ErrorContains(t, rep.Err(), "porcupine")
	require.Equal(t, porcupine.Illegal, rep.Linearizable)

	// Had H0's Release found its permit gone, the server could have let
	// it expire at its Deadline.
	ops[find(ops, faults.KindRelease, "H0", "")].Outcome = faults.OutcomeNotHeld
	rep = faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
}

// A job record claimed by a newer permit refuses the old holder's later
// write: a stale write, rejected. Rejected inside the writer's window, it
// is a violation, as for a lock.
func TestCheckerJobRecords(t *testing.T) {
	ops := permitHistory(2, 2)
	i := find(ops, faults.KindHold, "H0", "")
	ops[i].Return, ops[i].Outcome = 600, "deadline"
	ops[find(ops, faults.KindRelease, "H0", "")].Outcome = faults.OutcomeNotHeld
	ops = append(ops,
		// B takes H0's permit after its Deadline and claims its job.
		faults.Op{Kind: faults.KindObtain, Key: "s", Limit: 2, Holder: "B", Fence: 300, Call: 700, Return: 701, Outcome: faults.OutcomeOK},
		faults.Op{Kind: faults.KindWrite, Key: "s/job-0", Under: "s", Holder: "B", Fence: 300, Call: 710, Return: 711, Outcome: faults.OutcomeAccepted},
		faults.Op{Kind: faults.KindHold, Key: "s", Limit: 2, Holder: "B", Fence: 300, ObtainCall: 700, Call: 701, Return: 800, Outcome: "released"},
		// H0, paused past its Deadline, writes late.
		faults.Op{Kind: faults.KindWrite, Key: "s/job-0", Under: "s", Holder: "H0", Fence: 100, Call: 720, Return: 721, Outcome: faults.OutcomeRejected})
	rep := faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 1, rep.StaleRejected)

	// B claimed the job while H0 still believed.
	ops[i].Return = 800
	rep = faults.CheckOps(ops)
	require.ErrorContains(t, rep.Err(), `key "s/job-0": a write by H0 with fence 100 at 0.001ms was rejected inside its holding window`)
}

// TestCheckerAllowsSchedulingAfterDeadline: a lock returned a moment after
// its Deadline (the goroutine was held up between the library's last look
// at the Deadline and the return, as under -race on a loaded machine) is
// not a violation; 20ms late is (see the table above).
func TestCheckerAllowsSchedulingAfterDeadline(t *testing.T) {
	ops := edit(func(ops []faults.Op) []faults.Op {
		i := find(ops, faults.KindHold, "B", "")
		ops[i].Return, ops[i].Outcome = ops[i].Call-int64(time.Microsecond), "deadline"
		return ops
	})
	require.NoError(t, faults.CheckOps(ops).Err())
}
