package notify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHandoff(t *testing.T) {
	h, ok := parseHandoff("10000 1796025294150478 3f1c-token")
	require.True(t, ok)
	require.Equal(t, Handoff{Token: "3f1c-token", TTL: 10 * time.Second, Fence: 1796025294150478}, h)

	h, ok = parseHandoff("5 0 t")
	require.True(t, ok)
	require.Equal(t, Handoff{Token: "t", TTL: 5 * time.Millisecond}, h)

	// Plain releases, and anything someone else might publish on the
	// channel, are not handoffs.
	for _, p := range []string{"", "x", "10 0", "10 0 ", "0 0 t", "-1 0 t", "10 -2 t", "a 0 t", "10 b t", " 0 t"} {
		_, ok := parseHandoff(p)
		require.False(t, ok, "%q", p)
	}
}
