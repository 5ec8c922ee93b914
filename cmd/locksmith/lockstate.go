package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// lockState is a lock as Redis has it: what status prints, and what
// release --force deleted.
type lockState struct {
	// Time is when status --watch read the state; absent otherwise.
	Time     *time.Time `json:"time,omitempty"`
	Key      string     `json:"key"`       // as given, without the prefix
	RedisKey string     `json:"redis_key"` // prefix + key
	Held     bool       `json:"held"`
	// Token identifies the holder's acquisition; its COMMAND has it as
	// LOCKSMITH_TOKEN. Absent unless status --show-token: Mark tells
	// holders apart without it.
	Token string `json:"token,omitempty"`
	// Mark is tokenMark of Token; absent when the lock is free.
	Mark string `json:"token_mark,omitempty"`
	// SetSize is the number of keys of the set the holder holds the key
	// with (run --key A --key B; see LockStatus.SetSize): every key of
	// the set has the same Mark. Absent for a lock held alone, or free.
	// release does not read it.
	SetSize int `json:"set_size,omitempty"`
	// TTLMillis is the remaining time to live in milliseconds, or -1 when
	// the key has no expiry (it was not set by locksmith). Absent when the
	// lock is free.
	TTLMillis *int64 `json:"ttl_ms,omitempty"`
	// Fence is the last fencing token issued for the key (run --fencing);
	// absent when none was. release does not read it.
	Fence int64 `json:"fence,omitempty"`
	// Done is the record of a run --once that succeeded; absent when
	// there is none. release does not read it.
	Done *doneState `json:"done,omitempty"`
	// Queued is the number of waiters queued for a handoff of the lock
	// (about one per waiting process); absent when there are none.
	// release does not read it.
	Queued int `json:"queued,omitempty"`

	// otherKind is set by deleteLock when the key it deleted held a
	// semaphore or a read-write lock, not a lock.
	otherKind bool
}

// errNotALock is deleteLock's refusal of a semaphore's or read-write
// lock's key.
var errNotALock = errors.New("the key holds a semaphore or a read-write lock, not a lock; release --force deletes only locks (see status)")

// doneState is the record run --once keeps of a success.
type doneState struct {
	CompletedAt time.Time `json:"completed_at"`    // in UTC
	By          string    `json:"by"`              // the locksmith that ran it, as "host:pid"
	Token       string    `json:"token,omitempty"` // the token of the lock it ran under (status --show-token)
	Mark        string    `json:"token_mark"`      // tokenMark of that token
}

// newLockState returns the state that Inspect read for the lock on key
// under prefix.
func newLockState(prefix, key string, s locksmith.LockStatus) lockState {
	st := lockState{Key: key, RedisKey: prefix + key, Fence: s.Fence, Queued: s.Queued}
	if s.Held {
		st.setHeld(s.Token, s.TTL)
		st.SetSize = s.SetSize
	}
	if d := s.Done; d != nil {
		st.Done = &doneState{CompletedAt: d.At, By: d.By, Token: d.Token, Mark: tokenMark(d.Token)}
	}
	return st
}

// deleteLock deletes the lock that c names, and returns what it deleted,
// read in the same MULTI/EXEC transaction. It then announces the release
// on the lock's release channel, as the library's release does, so that
// waiting Lockers try at once rather than at their next poll.
func deleteLock(ctx context.Context, client redis.UniversalClient, c *connFlags) (lockState, error) {
	keys, err := locksmith.New(client, locksmith.WithPrefix(c.prefix)).Keys(c.key)
	if err != nil {
		return lockState{}, err
	}
	st := lockState{Key: c.key, RedisKey: keys.Lock}
	// A semaphore or a read-write lock is a sorted set: GET refuses it.
	// Look before the transaction, in which a refused GET would not stop
	// the DEL.
	if err := client.Get(ctx, st.RedisKey).Err(); redis.HasErrorPrefix(err, "WRONGTYPE") {
		return st, errNotALock
	}
	var (
		get  *redis.StringCmd
		pttl *redis.DurationCmd
	)
	_, err = client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, st.RedisKey)
		pttl = p.PTTL(ctx, st.RedisKey)
		p.Del(ctx, st.RedisKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, err
	}
	token, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return st, nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		// It became a semaphore or a read-write lock since the look
		// above, and the DEL deleted it: say so, it is done.
		st.Held, st.otherKind = true, true
		announceRelease(ctx, client, keys.Channel)
		return st, nil
	case err != nil:
		return st, err
	}
	st.setHeld(token, pttl.Val())
	announceRelease(ctx, client, keys.Channel)
	return st, nil
}

// announceRelease publishes the empty message of a plain release on
// channel: with SPUBLISH on Redis Cluster, where the library subscribes
// with SSUBSCRIBE, and PUBLISH elsewhere. It is sent after the
// transaction, not in it, because a command refused in a MULTI (a user
// whose ACL grants no channel rights gets NOPERM) aborts the whole EXEC;
// and its error is dropped, because the lock is deleted whether or not
// waiters hear of it: they notice at their next attempt.
func announceRelease(ctx context.Context, client redis.UniversalClient, channel string) {
	if _, sharded := client.(*redis.ClusterClient); sharded {
		_ = client.SPublish(ctx, channel, "").Err()
		return
	}
	_ = client.Publish(ctx, channel, "").Err()
}

// setHeld records that the lock is held by token, with ttl left; a
// negative ttl means the key has no expiry.
func (st *lockState) setHeld(token string, ttl time.Duration) {
	ms := int64(-1)
	if ttl >= 0 {
		ms = ttl.Milliseconds()
	}
	st.Held, st.Token, st.Mark, st.TTLMillis = true, token, tokenMark(token), &ms
	st.SetSize = locksmith.SetSizeOf(token)
}

// name names the lock in messages.
func (st lockState) name() string {
	return fmt.Sprintf("lock %q (Redis key %q)", st.Key, st.RedisKey)
}

// describe returns st in words, for a person: one line on the lock, and
// one each on the waiters queued for it, the fencing token and the record
// of a success, if any. now is the time to tell the record's age by.
func (st lockState) describe(now time.Time) string {
	lines := []string{st.name() + " is free"}
	if st.Held {
		lines[0] = fmt.Sprintf("%s is held by %s%s, %s", st.name(), tokenText(st.Token, st.Mark), setText(st.SetSize), st.remaining())
	}
	switch st.Queued {
	case 0:
	case 1:
		lines = append(lines, "1 waiter queued for it")
	default:
		lines = append(lines, fmt.Sprintf("%d waiters queued for it", st.Queued))
	}
	if st.Fence != 0 {
		lines = append(lines, fmt.Sprintf("last fencing token: %d", st.Fence))
	}
	if d := st.Done; d != nil {
		lines = append(lines, fmt.Sprintf("a run --once succeeded at %s (%v ago), by %s under %s",
			d.CompletedAt.Format(time.RFC3339), now.Sub(d.CompletedAt).Round(time.Second), d.By, tokenText(d.Token, d.Mark)))
	}
	return strings.Join(lines, "\n")
}

func (st lockState) fingerprint() string {
	var done string
	if d := st.Done; d != nil {
		done = fmt.Sprintf("%v %q %q", d.CompletedAt, d.By, d.Mark)
	}
	expires := st.TTLMillis != nil && *st.TTLMillis >= 0
	return fmt.Sprintf("lock %t %q %t %d %d %s", st.Held, st.Mark, expires, st.Fence, st.Queued, done)
}

func (st lockState) withoutTokens() keyState {
	st.Token = ""
	if st.Done != nil {
		d := *st.Done
		d.Token = ""
		st.Done = &d
	}
	return st
}

func (st lockState) at(t time.Time) keyState {
	st.Time = &t
	return st
}

// setText says, after the holder's token, that it holds the key as part
// of a set of n keys; it is empty for a key held alone (n is 0).
func setText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" as part of a set of %d keys", n)
}

// remaining describes the remaining TTL of a held lock.
func (st lockState) remaining() string {
	if *st.TTLMillis < 0 {
		return "with no expiry (not set by locksmith)"
	}
	return fmt.Sprintf("%v left", time.Duration(*st.TTLMillis)*time.Millisecond)
}
