package locksmith

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueEntryFormat(t *testing.T) {
	require.Equal(t, "10000 0 tok-1", queueEntry(10000, false, "tok-1"))
	require.Equal(t, "250 1 a b", queueEntry(250, true, "a b"))
}
