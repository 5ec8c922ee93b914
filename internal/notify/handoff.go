package notify

import (
	"strconv"
	"strings"
	"time"
)

// What a Notifier knows of handoffs (see the root package's handoff.go):
// the lifetimes of a waiter's entry in a handoff queue, and the
// announcement of a handoff.

// Lifetimes of handoff queue entries: an entry lapses QueueEntryLife after
// it was last renewed, and its waiter renews it after QueueEntryRenew.
const (
	QueueEntryLife  = 5 * time.Second
	QueueEntryRenew = 2 * time.Second
)

// A Handoff is an announced handoff: the lock now holds Token, with TTL,
// and Fence as its fencing token (0 without fencing).
type Handoff struct {
	Token string
	TTL   time.Duration
	Fence int64
}

// parseHandoff reads the announcement of a handoff, as the release
// scripts write it: "<ttl ms> <fence> <token>"; ok is false for anything
// else, such as the empty announcement of a plain release.
func parseHandoff(payload string) (h Handoff, ok bool) {
	ttl, rest, ok1 := strings.Cut(payload, " ")
	fence, token, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || token == "" {
		return Handoff{}, false
	}
	ms, err1 := strconv.ParseInt(ttl, 10, 64)
	f, err2 := strconv.ParseInt(fence, 10, 64)
	if err1 != nil || err2 != nil || ms <= 0 || f < 0 {
		return Handoff{}, false
	}
	return Handoff{Token: token, TTL: time.Duration(ms) * time.Millisecond, Fence: f}, true
}

// holderExpiry returns when a holder whose remaining TTL an attempt
// reported will have lost the lock, or zero when its key has no expiry.
func holderExpiry(holderTTL time.Duration) time.Time {
	if holderTTL < 0 {
		return time.Time{}
	}
	// Redis reports whole milliseconds, rounded: allow one more.
	return time.Now().Add(holderTTL + time.Millisecond)
}
