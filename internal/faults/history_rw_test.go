//go:build linux

package faults_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/locksmith-go/locksmith/internal/faults"
)

// rwHistory is holders of read-write lock "rw", one for each access:
// holder i obtains fence 100+i at 10i, holds (a writer writing to the
// record "rw") until it releases, from 1000 on. All the windows are open
// from the last acquisition to the first release.
func rwHistory(access ...string) []faults.Op {
	var ops []faults.Op
	for i, a := range access {
		holder, fence, at := fmt.Sprintf("%s-%d", a, i), int64(100+i), int64(10*i)
		ops = append(ops,
			faults.Op{Kind: faults.KindObtain, Key: "rw", Access: a, Holder: holder, Fence: fence, Call: at, Return: at + 1, Outcome: faults.OutcomeOK},
			faults.Op{Kind: faults.KindHold, Key: "rw", Access: a, Holder: holder, Fence: fence, ObtainCall: at, Call: at + 1, Return: 1000 + at, Outcome: "released"},
			faults.Op{Kind: faults.KindRelease, Key: "rw", Holder: holder, Fence: fence, Call: 1000 + at, Return: 1001 + at, Outcome: faults.OutcomeOK})
		if a == faults.AccessWrite {
			ops = append(ops, faults.Op{Kind: faults.KindWrite, Key: "rw", Holder: holder, Fence: fence,
				Call: 500 + at, Return: 501 + at, Outcome: faults.OutcomeAccepted})
		}
	}
	return ops
}

// The read-write check: read windows may overlap, any number of them; a
// write window may overlap no other, read or write, in either order.
// Porcupine, whose model lets a writer in only when nobody holds and a
// reader only when no writer does, agrees.
func TestCheckerReadWriteWindows(t *testing.T) {
	r, w := faults.AccessRead, faults.AccessWrite
	for _, c := range []struct {
		name   string
		access []string
		ok     bool
	}{
		{"one writer", []string{w}, true},
		{"five readers", []string{r, r, r, r, r}, true},
		{"a writer, then a reader", []string{w, r}, false},
		{"readers, then a writer", []string{r, r, w}, false},
		{"two writers", []string{w, w}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := faults.CheckOps(rwHistory(c.access...))
			require.True(t, rep.ReadWrite["rw"])
			require.Equal(t, len(c.access), rep.Peak["rw"], "the most holders at once")
			if c.ok {
				require.NoError(t, rep.Err())
				require.Equal(t, porcupine.Ok, rep.Linearizable)
				require.Contains(t, rep.Summary(), fmt.Sprintf("rw %d (readers, or one writer)", len(c.access)))
				return
			}
			require.ErrorContains(t, rep.Err(), fmt.Sprintf("%d holding windows overlap at", len(c.access)))
			require.ErrorContains(t, rep.Err(), "a write window among them")
			require.Equal(t, porcupine.Illegal, rep.Linearizable)
		})
	}
}

// Windows that follow one another pass whatever their access, and a
// writer's window that ends just before a reader's begins is no
// overlap; held a little longer, into the reader's, it is one. A
// restart that lost the server's data in between excuses it.
func TestCheckerReadWriteHandover(t *testing.T) {
	seq := func(access ...string) []faults.Op {
		var ops []faults.Op
		for i, a := range access {
			holder, fence, at := fmt.Sprintf("%s-%d", a, i), int64(100+i), int64(100*i)
			ops = append(ops,
				faults.Op{Kind: faults.KindObtain, Key: "rw", Access: a, Holder: holder, Fence: fence, Call: at, Return: at + 1, Outcome: faults.OutcomeOK},
				faults.Op{Kind: faults.KindHold, Key: "rw", Access: a, Holder: holder, Fence: fence, ObtainCall: at, Call: at + 1, Return: at + 90, Outcome: "released"},
				faults.Op{Kind: faults.KindRelease, Key: "rw", Holder: holder, Fence: fence, Call: at + 90, Return: at + 91, Outcome: faults.OutcomeOK})
		}
		return ops
	}
	r, w := faults.AccessRead, faults.AccessWrite
	ops := seq(w, r, w, w, r)
	rep := faults.CheckOps(ops)
	require.NoError(t, rep.Err())
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.Equal(t, 1, rep.Peak["rw"])

	// The first writer's window (and its Release) reaches into the
	// reader's, which obtained at 100.
	ops[1].Return, ops[2].Call, ops[2].Return = 150, 150, 151
	rep = faults.CheckOps(ops)
	require.ErrorContains(t, rep.Err(), "2 holding windows overlap at 0.000ms, a write window among them: read-1 read fence 101 [0.000ms, 0.000ms], write-0 write fence 100")
	require.Equal(t, porcupine.Illegal, rep.Linearizable)

	// The server forgot the writer in the restart, so its Release
	// found nothing.
	ops[2].Outcome = faults.OutcomeNotHeld
	lost := append(ops, faults.Op{Kind: faults.KindFault, Detail: "redis-restart", Call: 50, Return: 60, LosesData: true})
	rep = faults.CheckOps(lost)
	require.NoError(t, rep.Err())
	require.Equal(t, 1, rep.ExcusedOverlaps)
	require.Equal(t, porcupine.Ok, rep.Linearizable)
	require.True(t, strings.Contains(rep.Summary(), "read-write keys:"))
}
