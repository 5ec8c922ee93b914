package locksmith

import (
	"fmt"
	"strings"
)

// The key layout.
//
// The lock on key k of a Locker with prefix p is the Redis key p+k,
// exactly: other clients (the SET NX PX recipe, redis-cli) may lock the
// same key. Everything else a lock needs, its handoff queue, fence
// counter, completion record and release channel, is a companion named
//
//	p + "~" + kind + ":" + k             when p+k has a hash tag
//	p + "~" + kind + "#{" + p + k + "}"  when it has none and no '}'
//	p + "~" + kind + "%" + k + xxxx      otherwise (see forcedCompanion)
//
// with kind one of queue, fence, done, leader and released. So every name a lock
// uses starts with the prefix, and a user scoped to it by an ACL key
// pattern (~p*) and channel pattern (&p*) can use the whole API; and every
// companion lives in the lock key's Redis Cluster slot, so that one script
// may touch them all. Distinct lock names never share a companion: each
// form is one-to-one, and the character after the kind tells the forms
// apart. Lock names that start with "~" are refused (ErrInvalidArgument),
// since they could equal a companion, and prefixes whose braces do not
// form a whole hash tag are refused, since a companion could then leave
// the lock key's slot.

// companionMark starts the part of a companion's name after the prefix.
// Lock names must not start with it.
const companionMark = "~"

// The kinds of companion a lock has.
const (
	queueKind    = "queue"    // the handoff queue: see handoff.go
	fenceKind    = "fence"    // the fence counter: see WithFencing
	doneKind     = "done"     // the completion record: see Once
	releasedKind = "released" // the release channel: see wait.go
	leaderKind   = "leader"   // an election leader's proclaimed value: see Term.Proclaim
)

// checkKey reports whether key may name a lock.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case strings.HasPrefix(key, companionMark):
		return fmt.Errorf("%w: key %q starts with %q, which is reserved for the keys that locksmith keeps beside each lock",
			ErrInvalidArgument, key, companionMark)
	}
	return nil
}

// checkPrefix reports whether prefix may prefix lock keys: a '{' in it
// must open a whole hash tag, so that every lock key and its companions
// take their slot from that tag.
func checkPrefix(prefix string) error {
	if strings.IndexByte(prefix, '{') >= 0 && hashTag(prefix) == "" {
		return fmt.Errorf("%w: prefix %q has a '{' that opens no hash tag; use a whole one, such as {app}:, or no braces",
			ErrInvalidArgument, prefix)
	}
	return nil
}

// companion returns the name of the companion of kind of the lock on key
// under prefix, both already checked: see the key layout above.
func companion(prefix, key, kind string) string {
	rkey := prefix + key
	head := prefix + companionMark + kind
	switch {
	case hashTag(rkey) != "":
		// The tag is in the prefix or in the key; the kind inserted
		// between them has no braces, so it stays the first tag.
		return head + ":" + key
	case strings.IndexByte(rkey, '}') < 0:
		// The braces added here are the first ones closed (the prefix
		// has no '{', and rkey no '}'), so rkey becomes the tag.
		return head + "#{" + rkey + "}"
	}
	return forcedCompanion(head+"%"+key, rkey)
}

// forcedCompanion returns base followed by four characters from '0' to
// '?' (0x30 to 0x3f), the first such name, in order, that Redis Cluster
// assigns to the slot of rkey, a key without a hash tag. base has no hash
// tag either, and none of the four characters is a brace, so the whole
// text decides the slot; the characters vary 16 bits of the checksum's
// input, which reaches every slot. It is needed only for keys that
// contain a '}' without forming a tag (such as "a}b"), which no tag can
// match, and takes at most 65536 short checksums.
func forcedCompanion(base, rkey string) string {
	want := crc16(0, rkey) & (clusterSlots - 1)
	sum := crc16(0, base)
	var tail [4]byte
	for n := range 1 << 16 {
		for i := range tail {
			tail[i] = '0' + byte(n>>(12-4*i)&0xf)
		}
		if crc16(sum, string(tail[:]))&(clusterSlots-1) == want {
			return base + string(tail[:])
		}
	}
	panic("locksmith: no companion key in the slot of " + rkey) // unreachable: every slot is reached
}

// hashTag returns the hash tag of a Redis key, following Redis Cluster's
// rule: the text between the first '{' and the first '}' after it, if that
// text is not empty. A key with a hash tag is assigned to the cluster slot
// of its tag; any other key, to the slot of its whole text. It returns ""
// when the key has no hash tag.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return ""
	}
	return key[open+1 : open+1+n]
}

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// crc16 continues the CRC-16/XMODEM checksum crc over s; Redis Cluster
// assigns a key to slot crc16(0, key) mod 16384 (or of its hash tag).
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

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
		Queue:   companion(prefix, key, queueKind),
		Fence:   companion(prefix, key, fenceKind),
		Done:    companion(prefix, key, doneKind),
		Leader:  companion(prefix, key, leaderKind),
		Channel: companion(prefix, key, releasedKind),
	}
}
