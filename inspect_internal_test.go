package locksmith

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestSetSize(t *testing.T) {
	const id = "6f1c2e0a-93b4-4d7e-8a51-0c2f3b9d4e17"
	for token, want := range map[string]int{
		id + "/2":    2,
		id + "/3":    3,
		id + "/1000": 1000,
	} {
		require.Equal(t, want, setSize(token), "token %q", token)
	}
	for _, token := range []string{
		"",
		// A single lock's token, and election terms' (the value may hold
		// a slash and a number).
		id, id + " db1:4242", id + " db1/2", id + " /2",
		// Tokens written by hand.
		"x/abc", "tok/2", "/2",
		// No size of a set that ObtainAll writes: none, no number, one
		// key (ObtainAll of one key is Obtain), signed, leading zeros,
		// white space, two slashes, out of range.
		id + "/", id + "/abc", id + "/1", id + "/0", id + "/-2", id + "/+2", id + "/02",
		id + "/2 ", id + " /2", id + "/2/3", id + "/99999999999999999999",
		// Forms of a UUID that setToken never writes.
		strings.ToUpper(id) + "/2", "{" + id + "}/2", "urn:uuid:" + id + "/2",
		strings.ReplaceAll(id, "-", "") + "/2",
	} {
		require.Zero(t, setSize(token), "token %q", token)
	}
}

// TestSetSizeOfSetToken checks that setSize reads the size back from each
// token setToken writes, and none from the other tokens a lock is taken
// with.
func TestSetSizeOfSetToken(t *testing.T) {
	for _, n := range []int{2, 3, 10, 64} {
		require.Equal(t, n, setSize(setToken(n)), "n %d", n)
	}
	require.Zero(t, setSize(newToken(&config{})), "a single lock's token")
	require.Zero(t, setSize(newToken(&config{election: true, value: "db1/2"})), "an election term's token")
	require.Zero(t, setSize(uuid.NewString()), "a UUID alone")
}
