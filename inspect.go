package locksmith

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// What an operator can learn of a lock without touching it: its names in
// Redis (Locker.Keys) and what Redis holds there (Inspect).
//
// The key layout (the names of a lock's companions, and the cluster slot
// rules that keep them beside it) is internal/keyslot's; Keys is its
// public face. (The checks that give its refusals the error class
// ErrInvalidArgument are with the other arguments' checks, in options.go.)

// Keys are the names in Redis of one lock and of what locksmith keeps
// beside it, as Locker.Keys returns them: for an operator's ACL rules,
// dashboards and scripts. Every name starts with the Locker's prefix, and
// all live in the lock key's Redis Cluster slot.
type Keys struct {
	// Lock is the lock key itself, prefix+key: it holds the holder's
	// token while the lock is held, and does not exist while it is free.
	Lock string
	// Queue is the sorted set of waiters queued for a direct handoff.
	Queue string
	// Fence is the fence counter of WithFencing.
	Fence string
	// Done is the completion record of Once.
	Done string
	// Leader holds the value an election's leader proclaimed (see
	// Term.Proclaim), prefixed by its token; it lives no longer than the
	// leader's term.
	Leader string
	// Channel is the pub/sub channel on which releases are announced
	// (sharded pub/sub on Redis Cluster).
	Channel string
}

// Keys returns the Redis names of the lock on key with the options (only
// the prefix matters), after checking them as Obtain does. It sends
// nothing to Redis.
func (l *Locker) Keys(key string, opts ...Option) (Keys, error) {
	cfg, err := l.callConfig(key, opts)
	if err != nil {
		return Keys{}, err
	}
	return keysOf(cfg.prefix, key), nil
}

// keysOf returns the names of the lock on key under prefix.
func keysOf(prefix, key string) Keys {
	return Keys{
		Lock:    prefix + key,
		Queue:   keyslot.Companion(prefix, key, keyslot.Queue),
		Fence:   keyslot.Companion(prefix, key, keyslot.Fence),
		Done:    keyslot.Companion(prefix, key, keyslot.Done),
		Leader:  keyslot.Companion(prefix, key, keyslot.Leader),
		Channel: keyslot.Companion(prefix, key, keyslot.Released),
	}
}

// A LockStatus is what Redis holds for one lock key, as Inspect reads it:
// the lock, its fence counter, its completion record and its handoff
// queue.
type LockStatus struct {
	// Held reports whether someone holds the lock.
	Held bool
	// Token is the holder's token (see Lock.Token), or "" when the lock
	// is free.
	Token string
	// SetSize is the number of keys of the set that the holder holds
	// this key with (see Locker.ObtainAll): n for a set of n keys, every
	// one of which holds the same Token. It is 0 when the lock is free,
	// held alone (Obtain, an ObtainAll of one key, an election's term),
	// or held with a token of a form ObtainAll does not write. It is read
	// from Token, which names the size of its set: the set's other keys
	// are not read, and may be gone already if the set is being lost.
	SetSize int
	// TTL is the lock's remaining time to live, as the server counts it,
	// or 0 when the lock is free. It is negative when the key has no
	// expiry, which only happens when something outside this package set
	// it.
	TTL time.Duration
	// Fence is the last fencing token issued for the key (see
	// WithFencing), or 0 when none was. It is the holder's own token
	// only if the holder obtained the lock with fencing.
	Fence int64
	// Done is the completion record Once keeps for the key, or nil when
	// there is none: the job has not completed, or its record expired.
	Done *Completion
	// Queued is the number of waiters queued for a handoff of the lock:
	// about one per Locker with Obtain calls waiting for it, plus, for at
	// most 5s, one for each goroutine whose first attempt raced with
	// another of the same Locker's (see docs/behaviour.md). Waiters on a
	// quorum or with WithReplicas are not queued, and not counted.
	Queued int
}

// Inspect reads the state of the lock on key, for status pages and
// operators: whether it is held, by which token and for how long, whether
// its holder holds it as part of a set (ObtainAll) and of how many keys,
// the last fencing token issued for it, the completion record Once keeps
// for it, and how many waiters are queued for it. It changes nothing, and
// holds no lock: the state may change as soon as it is read. The options
// are checked as for Obtain, but only the prefix matters.
//
// Inspect reads the four keys in one step, so they are consistent with
// each other, in one round trip (two when the server first answers
// NOSCRIPT). They share the lock key's Redis Cluster slot (see Once), so
// Inspect works on Redis Cluster too.
//
// An error means Redis could not answer, or one of the keys holds
// something this package did not write there.
func (l *Locker) Inspect(ctx context.Context, key string, opts ...Option) (LockStatus, error) {
	cfg, err := l.callConfigFor(key, opts, callInspect)
	if err != nil {
		return LockStatus{}, err
	}
	st := l.extras
	k := keysOf(cfg.prefix, key)
	fenceKey, doneKey := k.Fence, k.Done
	raw, err := st.inspect(ctx, []string{k.Lock, fenceKey, doneKey, k.Queue})
	if err != nil {
		return LockStatus{}, fmt.Errorf("locksmith: inspect %q: %w", key, err)
	}
	s := LockStatus{Queued: int(raw.queued)}
	if raw.held {
		s.Held, s.Token, s.TTL, s.SetSize = true, raw.token, raw.ttl, setSize(raw.token)
	}
	if raw.hasFence {
		s.Fence, err = strconv.ParseInt(raw.fence, 10, 64)
		if err != nil {
			return LockStatus{}, fmt.Errorf("locksmith: fence counter of %q at %q is not one WithFencing wrote: %w", key, fenceKey, err)
		}
	}
	if raw.hasRecord {
		c, err := decodeCompletion(raw.record)
		if err != nil {
			return LockStatus{}, fmt.Errorf("locksmith: completion record of %q at %q is not one Once wrote: %w", key, doneKey, err)
		}
		s.Done = &c
	}
	return s, nil
}

// SetSizeOf returns the number of keys of the set of locks a token was
// issued for (Locker.ObtainAll), as LockStatus.SetSize reports it for a
// held key, or 0 for any other token: a single lock's, an election
// term's, or one written by someone else. The locksmith CLI uses it to
// say what its release --force deleted.
func SetSizeOf(token string) int { return setSize(token) }

// setSize returns the number of keys of the set whose token is token, as
// setToken (multi.go) writes it: a UUID in its canonical form, a slash
// and n, a number of two or more written without a sign or leading
// zeros. It returns 0 for a token of any other form: a single lock's (a
// UUID alone), an election term's (a UUID, a space and a value that may
// hold slashes), or one written by someone else.
func setSize(token string) int {
	id, count, ok := strings.Cut(token, "/")
	if !ok {
		return 0
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return 0 // uuid.Parse also takes forms that setToken never writes
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 2 || strconv.Itoa(n) != count {
		return 0
	}
	return n
}

// decodeCompletion decodes a completion record as Once writes it.
func decodeCompletion(record string) (Completion, error) {
	var r completionRecord
	if err := json.Unmarshal([]byte(record), &r); err != nil {
		return Completion{}, err
	}
	return Completion{At: r.CompletedAt, By: r.By, Token: r.Token, Fence: r.Fence}, nil
}

// rawStatus is what a store reads for Inspect: the values of the lock key,
// the fence counter and the completion record, and the live entries of
// the handoff queue.
type rawStatus struct {
	held      bool
	token     string
	ttl       time.Duration // negative when the lock key has no expiry
	hasFence  bool
	fence     string
	hasRecord bool
	record    string
	queued    int64
}

// An inspectStore is a store that can read a lock's state for Inspect.
type inspectStore interface {
	// inspect reads, in one step, the lock key keys[0] and its TTL, and
	// its companions in its cluster slot: the fence counter keys[1], the
	// completion record keys[2] and the handoff queue keys[3].
	inspect(ctx context.Context, keys []string) (rawStatus, error)
}

var _ inspectStore = redisStore{}

func (s redisStore) inspect(ctx context.Context, keys []string) (rawStatus, error) {
	args := make([]any, 3, 3+len(keys))
	args[2] = len(keys)
	for _, k := range keys {
		args = append(args, k)
	}
	res, err := inspectLua.run(ctx, s.client, args).Slice()
	if err != nil {
		return rawStatus{}, err
	}
	if len(res) != 5 {
		return rawStatus{}, fmt.Errorf("inspect script returned %d values, want 5", len(res))
	}
	var raw rawStatus
	raw.token, raw.held = res[0].(string)
	raw.fence, raw.hasFence = res[2].(string)
	raw.record, raw.hasRecord = res[3].(string)
	raw.queued, _ = res[4].(int64)
	if raw.held {
		ms, ok := res[1].(int64)
		if !ok {
			return rawStatus{}, fmt.Errorf("inspect script returned a PTTL of %T, want an integer", res[1])
		}
		raw.ttl = time.Duration(ms) * time.Millisecond
	}
	return raw, nil
}
