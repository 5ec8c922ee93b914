package locksmith

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/keyslot"
)

// need is a set of what calls need of the connected Redis user, as
// acl_probe.lua checks it.
type need uint32

const (
	needLock      need = 1 << iota // the lock key's commands and the scripts: every lock call
	needQueue                      // the handoff queue: a Locker from New (not NewQuorum)
	needFence                      // the fence counter: WithFencing
	needOnce                       // the completion record: Once
	needAnnounce                   // publishing and hearing releases: optional, waiters poll without it
	needInspect                    // Inspect
	needSemaphore                  // a semaphore's commands and the scripts: Semaphore calls
	needRW                         // a read-write lock's commands and the scripts: RWMutex calls
	needElection                   // an election's proclaimed value: Election calls
	needUptime                     // INFO server: a store with a restart guard adds it (see check)
)

// letters returns n as acl_probe.lua takes it.
func (n need) letters() string {
	var b strings.Builder
	for _, c := range []struct {
		n      need
		letter byte
	}{{needLock, 'l'}, {needSemaphore, 's'}, {needRW, 'w'}, {needQueue, 'q'}, {needFence, 'f'}, {needOnce, 'o'}, {needAnnounce, 'a'}, {needInspect, 'i'}, {needElection, 'e'}, {needUptime, 'u'}} {
		if n&c.n != 0 {
			b.WriteByte(c.letter)
		}
	}
	return b.String()
}

// needs returns what the calls on a lock with cfg need, beyond extra.
func (l *Locker) needs(cfg *config, extra need) need {
	n := needLock | extra
	if l.store.queues() {
		n |= needQueue
	}
	if cfg.fencing {
		n |= needFence
	}
	if cfg.election {
		n |= needElection
	}
	return n
}

// verify makes sure that the connected user may run what the calls on
// key with cfg need (see needs), before the first of them changes
// anything: once per Locker and set of needs, so it costs one round trip
// on a Locker's first call (and on its first call that needs more, such
// as its first Once), and nothing after. A user found lacking is asked
// again on the next call, in case it was granted meanwhile.
func (l *Locker) verify(ctx context.Context, cfg *config, key string, extra need) error {
	return l.verifyNeeds(ctx, cfg.prefix, key, l.needs(cfg, extra))
}

// verifyNeeds is verify for calls on key, under prefix, that need n.
func (l *Locker) verifyNeeds(ctx context.Context, prefix, key string, n need) error {
	if n&^need(l.verified.Load()) == 0 {
		return nil
	}
	refused, err := l.store.check(ctx, keysOf(prefix, key), n)
	switch {
	case err != nil && ctx.Err() != nil:
		return notObtained(ctx, key)
	case err != nil:
		return fmt.Errorf("locksmith: check the permissions for %q: %w", key, err)
	case len(refused) > 0:
		return permissionError(refused)
	}
	l.verified.Or(uint32(n))
	return nil
}

func permissionError(refused []string) error {
	return fmt.Errorf("%w: the Redis user may not run %s", ErrNoPermission, strings.Join(refused, ", "))
}

// Check reports whether the connected Redis user may run everything this
// Locker's calls can need: the scripts, the commands on lock keys and
// their companions (see Keys) under the Locker's prefix, fencing,
// completion records, Inspect, and publishing and subscribing to release
// announcements. It returns nil when it may, an error matching
// ErrNoPermission that names each refused command when it may not, and
// another error when Redis could not answer. It changes nothing in
// Redis, and is meant for a health check or an operator.
//
// Without announcements locks work, but waiters notice releases only by
// polling at their retry strategy's delays; everything else is needed.
// Servers before Redis 7.0 cannot tell a script what its user may run:
// there Check only shows that scripts run at all. Obtain, WithLock and
// Once make the same check for what they need, once per Locker, before
// anything is written.
func (l *Locker) Check(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	n := l.needs(&l.cfg, needAnnounce)
	fenced := l.cfg.usage(callLock)
	fenced.fencing = true
	if l.store.allows(fenced) == nil {
		n |= needFence | needElection
	}
	if l.store.allows(l.cfg.usage(callOnce)) == nil {
		n |= needOnce | needInspect
	}
	refused, err := l.store.check(ctx, keysOf(l.cfg.prefix, keyslot.Mark+"check"), n)
	switch {
	case err != nil:
		return fmt.Errorf("locksmith: check the permissions: %w", err)
	case len(refused) > 0:
		return permissionError(refused)
	}
	// The calls need not ask again.
	l.verified.Or(uint32(n))
	return nil
}

func (s redisStore) check(ctx context.Context, k Keys, n need) ([]string, error) {
	if s.guard != nil {
		// The restart guard reads each master's uptime (store_guard.go).
		n |= needUptime
	}
	sub := "subscribe"
	if s.sharded() {
		sub = "ssubscribe"
	}
	res, err := probeLua.run(ctx, s.client, []any{nil, nil, 5, k.Lock, k.Queue, k.Fence, k.Done, k.Leader,
		k.Channel, s.publish(), sub, n.letters()}).StringSlice()
	if redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "ERR unknown command") {
		// The script itself was refused: no EVALSHA or EVAL, or no access
		// to one of its keys.
		return []string{fmt.Sprintf("scripts over %q and its companions (%v)", k.Lock, err)}, nil
	}
	return res, err
}
