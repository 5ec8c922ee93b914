package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/locksmith-go/locksmith"
)

// semaphoreState is a semaphore as Redis has it (run --limit): what
// status prints for a key that holds one.
type semaphoreState struct {
	// Time is when status --watch read the state; absent otherwise.
	Time     *time.Time `json:"time,omitempty"`
	Key      string     `json:"key"`       // as given, without the prefix
	RedisKey string     `json:"redis_key"` // prefix + key
	// Kind is "semaphore", to tell this object from a lock's.
	Kind string `json:"kind"`
	// Holders are the unexpired permits, the one that expires first
	// first.
	Holders []permitState `json:"holders"`
	// Fence is the last fencing token issued for the key (run --limit
	// --fencing); absent when none was.
	Fence int64 `json:"fence,omitempty"`
	// Queued is how many waiters are queued for a handoff of a permit:
	// about one per process waiting for one.
	Queued int `json:"queued,omitempty"`
	// Listening is how many connections listen for the semaphore's
	// releases: about one per process waiting for a permit; -1 when the
	// Redis user may not count them.
	Listening int `json:"listening,omitempty"`
}

// permitState is one permit of a semaphore.
type permitState struct {
	Token     string `json:"token,omitempty"` // status --show-token only
	Mark      string `json:"token_mark"`      // tokenMark of the token
	TTLMillis int64  `json:"ttl_ms"`
}

// newPermitState returns the state of a hold by token with ttl left.
func newPermitState(token string, ttl time.Duration) permitState {
	return permitState{Token: token, Mark: tokenMark(token), TTLMillis: ttl.Milliseconds()}
}

// withoutTokens returns holds without their tokens, in a new slice.
func withoutTokens(holds []permitState) []permitState {
	out := make([]permitState, len(holds))
	for i, h := range holds {
		h.Token = ""
		out[i] = h
	}
	return out
}

func newSemaphoreState(prefix, key string, s locksmith.SemaphoreStatus) semaphoreState {
	st := semaphoreState{Key: key, RedisKey: prefix + key, Kind: "semaphore", Fence: s.Fence,
		Queued: s.Queued, Listening: s.Listening, Holders: []permitState{}}
	for _, h := range s.Holders {
		st.Holders = append(st.Holders, newPermitState(h.Token, h.TTL))
	}
	return st
}

// describe returns st in words, for a person: one line on the semaphore,
// one on each permit, and one each on the listeners and the fencing
// token, if any.
func (st semaphoreState) describe(time.Time) string {
	name := fmt.Sprintf("semaphore %q (Redis key %q)", st.Key, st.RedisKey)
	var lines []string
	switch len(st.Holders) {
	case 0:
		lines = append(lines, name+" has no permits held")
	case 1:
		lines = append(lines, name+" has 1 permit held:")
	default:
		lines = append(lines, fmt.Sprintf("%s has %d permits held:", name, len(st.Holders)))
	}
	for _, h := range st.Holders {
		lines = append(lines, fmt.Sprintf("  %s, %v left", tokenText(h.Token, h.Mark), time.Duration(h.TTLMillis)*time.Millisecond))
	}
	switch {
	case st.Listening < 0:
		lines = append(lines, "waiting processes not counted: the Redis user may not run PUBSUB NUMSUB")
	case st.Listening == 0:
	case st.Listening == 1:
		lines = append(lines, "1 process listening for its releases (waiting for a permit)")
	default:
		lines = append(lines, fmt.Sprintf("%d processes listening for its releases (waiting for a permit)", st.Listening))
	}
	switch {
	case st.Queued == 1:
		lines = append(lines, "1 waiter queued for a permit")
	case st.Queued > 1:
		lines = append(lines, fmt.Sprintf("%d waiters queued for a permit", st.Queued))
	}
	if st.Fence != 0 {
		lines = append(lines, fmt.Sprintf("last fencing token: %d", st.Fence))
	}
	return strings.Join(lines, "\n")
}

// rwState is a read-write lock as Redis has it: what status prints for a
// key that holds one.
type rwState struct {
	// Time is when status --watch read the state; absent otherwise.
	Time     *time.Time `json:"time,omitempty"`
	Key      string     `json:"key"`
	RedisKey string     `json:"redis_key"`
	// Kind is "rwlock", to tell this object from a lock's.
	Kind    string        `json:"kind"`
	Readers []permitState `json:"readers"`
	Writer  *permitState  `json:"writer,omitempty"`
	// WaitingWriters counts the writers whose intent stops new readers.
	WaitingWriters int   `json:"waiting_writers,omitempty"`
	Fence          int64 `json:"fence,omitempty"`
}

func newRWState(prefix, key string, s locksmith.RWStatus) rwState {
	st := rwState{Key: key, RedisKey: prefix + key, Kind: "rwlock", Fence: s.Fence,
		WaitingWriters: s.WaitingWriters, Readers: []permitState{}}
	for _, h := range s.Readers {
		st.Readers = append(st.Readers, newPermitState(h.Token, h.TTL))
	}
	if w := s.Writer; w != nil {
		writer := newPermitState(w.Token, w.TTL)
		st.Writer = &writer
	}
	return st
}

func (st rwState) describe(time.Time) string {
	name := fmt.Sprintf("read-write lock %q (Redis key %q)", st.Key, st.RedisKey)
	var lines []string
	switch {
	case st.Writer != nil:
		lines = append(lines, fmt.Sprintf("%s is held by writer %s, %v left", name, tokenText(st.Writer.Token, st.Writer.Mark),
			time.Duration(st.Writer.TTLMillis)*time.Millisecond))
	case len(st.Readers) == 0:
		lines = append(lines, name+" is free")
	default:
		lines = append(lines, fmt.Sprintf("%s is held by %d reader(s):", name, len(st.Readers)))
	}
	for _, h := range st.Readers {
		lines = append(lines, fmt.Sprintf("  %s, %v left", tokenText(h.Token, h.Mark), time.Duration(h.TTLMillis)*time.Millisecond))
	}
	if st.WaitingWriters > 0 {
		lines = append(lines, fmt.Sprintf("%d writer(s) waiting; new readers wait behind them", st.WaitingWriters))
	}
	if st.Fence != 0 {
		lines = append(lines, fmt.Sprintf("last fencing token: %d", st.Fence))
	}
	return strings.Join(lines, "\n")
}

func (st semaphoreState) fingerprint() string {
	return fmt.Sprintf("semaphore %q %d %d %d", tokens(st.Holders), st.Fence, st.Queued, st.Listening)
}

func (st semaphoreState) withoutTokens() keyState {
	st.Holders = withoutTokens(st.Holders)
	return st
}

func (st semaphoreState) at(t time.Time) keyState {
	st.Time = &t
	return st
}

func (st rwState) fingerprint() string {
	var writer string
	if st.Writer != nil {
		writer = st.Writer.Mark
	}
	return fmt.Sprintf("rwlock %q %q %d %d", tokens(st.Readers), writer, st.WaitingWriters, st.Fence)
}

func (st rwState) withoutTokens() keyState {
	st.Readers = withoutTokens(st.Readers)
	if st.Writer != nil {
		w := *st.Writer
		w.Token = ""
		st.Writer = &w
	}
	return st
}

func (st rwState) at(t time.Time) keyState {
	st.Time = &t
	return st
}

// tokens returns the marks of holds' tokens, sorted: the order of holds
// follows their expiry, which renewals change.
func tokens(holds []permitState) []string {
	ts := make([]string, 0, len(holds))
	for _, h := range holds {
		ts = append(ts, h.Mark)
	}
	slices.Sort(ts)
	return ts
}
