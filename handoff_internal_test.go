package locksmith

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQueueEntryFormat(t *testing.T) {
	require.Equal(t, "10000 0 tok-1", queueEntry(10000, false, "tok-1"))
	require.Equal(t, "250 1 a b", queueEntry(250, true, "a b"))
}

func TestParseHandoff(t *testing.T) {
	h, ok := parseHandoff("10000 1796025294150478 3f1c-token")
	require.True(t, ok)
	require.Equal(t, handoff{token: "3f1c-token", ttl: 10 * time.Second, fence: 1796025294150478}, h)

	h, ok = parseHandoff("5 0 t")
	require.True(t, ok)
	require.Equal(t, handoff{token: "t", ttl: 5 * time.Millisecond}, h)

	// Plain releases, and anything someone else might publish on the
	// channel, are not handoffs.
	for _, p := range []string{"", "x", "10 0", "10 0 ", "0 0 t", "-1 0 t", "10 -2 t", "a 0 t", "10 b t", " 0 t"} {
		_, ok := parseHandoff(p)
		require.False(t, ok, "%q", p)
	}
}
