package locksmith

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestClassOf(t *testing.T) {
	other := errors.New("connection refused")
	tests := []struct {
		name string
		err  error
		want ErrorClass
	}{
		{"nil", nil, ClassNone},
		{"held elsewhere", heldElsewhere("k"), ClassNotObtained},
		{"ctx ended", fmt.Errorf("%w: %q: %w", ErrNotObtained, "k", context.Canceled), ClassNotObtained},
		{"not held", fmt.Errorf("%w: gone", ErrNotHeld), ClassNotHeld},
		{"not held, as lost", fmt.Errorf("%w: %w", ErrNotHeld, ErrLockLost), ClassLost},
		{"lost", ErrLockLost, ClassLost},
		{"closed", closedErr("k"), ClassClosed},
		{"invalid", fmt.Errorf("%w: nil function", ErrInvalidArgument), ClassInvalid},
		{"no permission", fmt.Errorf("%w: evalsha", ErrNoPermission), ClassNoPermission},
		{"not replicated", fmt.Errorf("%w: 0 of 1", ErrNotReplicated), ClassNotReplicated},
		{"redis", fmt.Errorf("locksmith: obtain %q: %w", "k", other), ClassRedis},
		{"joined", errors.Join(other, ErrClosed), ClassClosed},
	}
	for _, tc := range tests {
		if got := classOf(tc.err); got != tc.want {
			t.Errorf("%s: classOf(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestEventNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{EventKind(0).String(), ""},
		{EventLeaseLost.String(), "lease-lost"},
		{EventSubscriber.String(), "subscriber"},
		{EventKind(200).String(), "unknown"},
		{HoldPermit.String(), "permit"},
		{OnceNotRun.String(), "not-run"},
		{ConnReplaced.String(), "replaced"},
		{ClassNone.String(), ""},
		{ClassRedis.String(), "redis-error"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
