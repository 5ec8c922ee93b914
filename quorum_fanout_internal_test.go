package locksmith

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBoundEndsAtDeadline checks that a call's bound ends its context at
// the deadline, as context.WithTimeout would, and that the timer reused
// by the next use does not end that use at the first one's deadline.
func TestBoundEndsAtDeadline(t *testing.T) {
	c := &quorumCall{}
	start := time.Now()
	c.bound(context.Background(), 50*time.Millisecond)
	first := c.ctx
	d, ok := first.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, start.Add(50*time.Millisecond), d, 20*time.Millisecond)
	select {
	case <-first.Done():
		t.Fatal("done before its deadline")
	case <-time.After(20 * time.Millisecond):
	}
	<-first.Done()
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.ErrorIs(t, first.Err(), context.DeadlineExceeded)
	c.unbound()
	require.ErrorIs(t, first.Err(), context.DeadlineExceeded, "an ended context changed its error")

	// A second use, with a later deadline: the timer, reset, ends it
	// then, not before.
	c.bound(context.Background(), 300*time.Millisecond)
	second := c.ctx
	require.NotSame(t, first, second, "a context was reused")
	select {
	case <-second.Done():
		t.Fatal("the second use ended early")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, second.Err())
	c.unbound()
	<-second.Done()
	require.ErrorIs(t, second.Err(), context.Canceled)
}

// TestBoundFollowsParent checks that a call's bound ends with its parent
// and takes its values.
func TestBoundFollowsParent(t *testing.T) {
	type key struct{}
	c := &quorumCall{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c.bound(parent, time.Hour)
	ctx := c.ctx
	require.Equal(t, "v", ctx.Value(key{}))
	require.NoError(t, ctx.Err())
	cancel()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done after its parent")
	}
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	c.unbound()

	// A parent already done: so is the bound, at once.
	c.bound(parent, time.Hour)
	require.ErrorIs(t, c.ctx.Err(), context.Canceled)
	c.unbound()
}
