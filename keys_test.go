package locksmith_test

import (
	"errors"
	"testing"

	"github.com/locksmith-go/locksmith"
)

// The layout's rules are tested in internal/keyslot; these tests check
// what Locker.Keys shows of them.

func TestKeys(t *testing.T) {
	got := names(t, "locksmith:", "report")
	want := locksmith.Keys{
		Lock:    "locksmith:report",
		Queue:   "locksmith:~queue#{locksmith:report}",
		Fence:   "locksmith:~fence#{locksmith:report}",
		Done:    "locksmith:~done#{locksmith:report}",
		Leader:  "locksmith:~leader#{locksmith:report}",
		Channel: "locksmith:~released#{locksmith:report}",
	}
	if got != want {
		t.Errorf("Keys = %+v, want %+v", got, want)
	}
}

// TestKeysRefused checks that a refused key or prefix gives an error that
// matches ErrInvalidArgument and says why.
func TestKeysRefused(t *testing.T) {
	for _, tc := range []struct {
		key, prefix, want string
	}{
		{"", "", "locksmith: invalid argument: empty key"},
		{"~queue:x", "", `locksmith: invalid argument: key "~queue:x" starts with "~", ` +
			"which is reserved for the keys that locksmith keeps beside each lock"},
		{"x", "a{", `locksmith: invalid argument: prefix "a{" has a '{' that opens no hash tag; ` +
			"use a whole one, such as {app}:, or no braces"},
	} {
		_, err := namer.Keys(tc.key, locksmith.WithPrefix(tc.prefix))
		if !errors.Is(err, locksmith.ErrInvalidArgument) {
			t.Errorf("Keys(%q, prefix %q) = %v, want ErrInvalidArgument", tc.key, tc.prefix, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Keys(%q, prefix %q) = %q, want %q", tc.key, tc.prefix, err, tc.want)
		}
	}
}
