package locksmith

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/locksmith-go/locksmith/internal/notify"
)

// Reading an election's leader: once (Leader), or as it changes (Observe).

// Leader is an election's leader, as read from Redis.
type Leader struct {
	// Elected is true when someone holds the election's lock: false only
	// in the zero Leader, which Observe posts while nobody leads.
	Elected bool
	// Value is the value the leader campaigned with, or the last one it
	// proclaimed. A holder of the election's lock that is not a candidate
	// (a plain Obtain of its name) has none.
	Value string
	// Fence is the fencing token of the leader's term: it increases from
	// term to term. A holder that did not campaign (the name locked with
	// Obtain) has no term: for it, Fence is the last term's, or 0.
	Fence int64
	// TTL is how long the leader's term had left when it was read, unless
	// it is renewed.
	TTL time.Duration
}

// rawLeader is what election_leader.lua found: nothing (token "") or the lock's
// holder, its remaining TTL, the fence counter, and the value it
// proclaimed, if any.
type rawLeader struct {
	token      string
	ttl        time.Duration
	fence      int64
	proclaimed *string
}

// leaderOf returns what raw says of the leader; ok is false when nobody
// leads.
func leaderOf(raw rawLeader) (l Leader, ok bool) {
	if raw.token == "" {
		return Leader{}, false
	}
	l = Leader{Elected: true, Fence: raw.fence, TTL: raw.ttl}
	switch {
	case raw.proclaimed != nil:
		l.Value = *raw.proclaimed
	case len(raw.token) > uuidLen && raw.token[uuidLen] == ' ':
		// A candidate's token: its UUID, a space and its value.
		l.Value = raw.token[uuidLen+1:]
	}
	return l, true
}

// uuidLen is the length of a UUID in its text form, which starts every
// token.
const uuidLen = 36

// Leader returns the election's current leader. It returns an error
// matching ErrNoLeader when nobody leads, and another error when Redis
// could not answer.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.usable(); err != nil {
		return Leader{}, err
	}
	if err := e.l.verifyNeeds(ctx, e.cfg.prefix, e.name, e.l.needs(&e.cfg, 0)); err != nil {
		return Leader{}, err
	}
	raw, err := e.l.extras.leader(ctx, keysOf(e.cfg.prefix, e.name))
	if err != nil {
		return Leader{}, fmt.Errorf("locksmith: read the leader of %q: %w", e.name, err)
	}
	l, ok := leaderOf(raw)
	if !ok {
		return Leader{}, fmt.Errorf("%w: in %q", ErrNoLeader, e.name)
	}
	return l, nil
}

// Timing of observers.
const (
	// observeUnheard is how often an observer reads the leader while its
	// subscription is not confirmed, or after a failed read.
	observeUnheard = 500 * time.Millisecond
	// observeQuiet bounds how long an observer that hears nothing trusts
	// what it read: a change not announced (an announcement refused by
	// an ACL rule, a holder that is not a candidate) is seen within it.
	observeQuiet = 5 * time.Second
)

// Observe returns a channel on which it posts the election's leader as it
// changes: first the current one, then each new leader or value it sees,
// and the zero Leader (Elected false) whenever nobody leads. The channel holds
// the latest post only: a reader that falls behind skips to the newest.
// The channel is closed when ctx ends or the Locker is closed.
//
// The observer listens to the election's announcements on the Locker's
// shared pub/sub connection, and reads the leader in one round trip when
// one is heard, so it sees a new leader within one announcement of a
// resignation, a handoff, a campaign won or a proclaimed value. It also
// reads when the leader's TTL runs out (a crashed leader is seen as gone
// then), at most every 5s while it hears nothing, and every 0.5s while
// its subscription is down; a failed read is retried as often. Its
// goroutine is stopped by the end of ctx or by Locker.Close, which waits
// for it.
//
// Observe returns an error, and starts nothing, only when the election
// cannot be used (an invalid name or option: ErrInvalidArgument; a closed
// Locker: ErrClosed; a Redis user lacking a permission: ErrNoPermission).
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := e.l.verifyNeeds(ctx, e.cfg.prefix, e.name, e.l.needs(&e.cfg, 0)); err != nil {
		return nil, err
	}
	out := make(chan Leader, 1)
	if !e.l.notify.Spawn(func() { e.observe(ctx, out) }) {
		return nil, fmt.Errorf("%w: observing %q", ErrClosed, e.name)
	}
	return out, nil
}

// observe runs an observer, posting on out, which it closes when it
// returns: when ctx ends or the Locker is closed.
func (e *Election) observe(ctx context.Context, out chan Leader) {
	defer close(out)
	n := e.l.notify
	// Reads end when the Locker is closed, too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.Context(), cancel)()
	k := keysOf(e.cfg.prefix, e.name)
	w := n.Watch(ctx, k.Channel)
	defer n.Unwatch(w)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last Leader
	posted := false
	for {
		raw, err := e.l.extras.leader(ctx, k)
		next := observeQuiet
		if err != nil {
			next = observeUnheard
		} else {
			cur, ok := leaderOf(raw)
			if !posted || cur.Elected != last.Elected || cur.Fence != last.Fence || cur.Value != last.Value {
				post(out, cur)
				last, posted = cur, true
			}
			if ok && cur.TTL >= 0 {
				// Redis reports whole milliseconds, rounded: allow one
				// more.
				next = min(next, cur.TTL+time.Millisecond)
			}
		}
		if !n.Listening(w) {
			next = min(next, observeUnheard)
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-w.Wake():
		case <-timer.C:
		}
	}
}

// post puts l on out, replacing a post not yet read: out has room for
// one, and only the observer sends on it.
func post(out chan Leader, l Leader) {
	select {
	case <-out:
	default:
	}
	out <- l
}

func (s redisStore) leader(ctx context.Context, k Keys) (rawLeader, error) {
	res, err := leaderLua.run(ctx, s.client, []any{nil, nil, 3, k.Lock, k.Fence, k.Leader}).Slice()
	if err != nil || len(res) == 0 {
		return rawLeader{}, err
	}
	if len(res) < 3 {
		return rawLeader{}, errBadReply
	}
	token, ok1 := res[0].(string)
	ttl, ok2 := res[1].(int64)
	fenceText, ok3 := res[2].(string)
	fence, err := strconv.ParseInt(fenceText, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil {
		return rawLeader{}, errBadReply
	}
	raw := rawLeader{token: token, ttl: time.Duration(ttl) * time.Millisecond, fence: fence}
	if ttl < 0 {
		raw.ttl = -1
	}
	if len(res) > 3 {
		v, ok := res[3].(string)
		if !ok {
			return rawLeader{}, errBadReply
		}
		raw.proclaimed = &v
	}
	return raw, nil
}

func (s redisStore) proclaim(ctx context.Context, ref lockRef, value string) (bool, error) {
	res, err := proclaimLua.run(ctx, s.client, []any{nil, nil, 2, ref.lockKey, ref.leader,
		ref.token, value, ref.channel, s.publish(), notify.NewsMark + "value"}).Int64()
	return res == 1, err
}

// news publishes msg, which starts with notify.NewsMark, on ch: on Redis
// Cluster with SPUBLISH, to the shard of ch's slot.
func (s redisStore) news(ctx context.Context, ch, msg string) error {
	if s.sharded() {
		return s.client.Do(ctx, "spublish", ch, msg).Err()
	}
	return s.client.Publish(ctx, ch, msg).Err()
}
