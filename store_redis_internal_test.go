package locksmith

import (
	"fmt"
	"testing"
)

// TestReleaseArgsExactCapacity: releaseArgs lays out every shape of the
// release script's arguments (with and without the queue, the fence
// counter, an election's value, a queue entry) in one slice of exactly
// the length it needs, and in the order lock_release.lua reads them.
func TestReleaseArgsExactCapacity(t *testing.T) {
	s := redisStore{}
	for _, c := range []struct {
		ref        lockRef
		companions bool
		entry      []any
		want       []any // after evalsha and the SHA
	}{
		{lockRef{lockKey: "k", token: "t", channel: "c"}, true, nil,
			[]any{1, "k", "t", "c"}},
		{lockRef{lockKey: "k", token: "t", channel: "c", queue: "q"}, false, nil,
			[]any{1, "k", "t", "c"}},
		{lockRef{lockKey: "k", token: "t", channel: "c", queue: "q"}, true, []any{"e"},
			[]any{2, "k", "q", "t", "c", "e"}},
		{lockRef{lockKey: "k", token: "t", channel: "c", queue: "q", fence: "f", fenceTTLMS: int64(9)}, true, nil,
			[]any{3, "k", "q", "f", "t", "c", int64(9)}},
		{lockRef{lockKey: "k", token: "t", channel: "c", queue: "q", fence: "f", leader: "v", fenceTTLMS: int64(0)}, true, []any{"e"},
			[]any{4, "k", "q", "f", "v", "t", "c", int64(0), "e"}},
	} {
		args := s.releaseArgs(c.ref, c.companions, c.entry...)
		if len(args) != cap(args) {
			t.Errorf("%v: len %d, cap %d", c.ref, len(args), cap(args))
		}
		if got, want := fmt.Sprint(args[2:]), fmt.Sprint(c.want); got != want {
			t.Errorf("%v: arguments %s, want %s", c.ref, got, want)
		}
	}
}
