package locksmith

import "github.com/locksmith-go/locksmith/internal/keyslot"

// The key layout (the names of a lock's companions, and the cluster slot
// rules that keep them beside it) is internal/keyslot's; this file holds
// its public face, Locker.Keys. (The checks that give its refusals the
// error class ErrInvalidArgument are with the other arguments' checks, in
// options.go.)

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
