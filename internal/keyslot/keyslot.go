// Package keyslot is locksmith's key layout: the names of what it keeps
// in Redis beside each lock, and the Redis Cluster slot rules that keep
// them in the lock key's slot.
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
// apart. Lock names that start with "~" are refused (see CheckKey),
// since they could equal a companion, and prefixes whose braces do not
// form a whole hash tag are refused (see CheckPrefix), since a companion
// could then leave the lock key's slot.
package keyslot

import (
	"errors"
	"fmt"
	"strings"
)

// Mark starts the part of a companion's name after the prefix. Lock
// names must not start with it.
const Mark = "~"

// A Kind is one kind of companion a lock has.
type Kind string

// The kinds of companion a lock has.
const (
	Queue    Kind = "queue"    // the handoff queue: see locksmith's handoff.go
	Fence    Kind = "fence"    // the fence counter: see locksmith.WithFencing
	Done     Kind = "done"     // the completion record: see locksmith.Once
	Released Kind = "released" // the release channel: see locksmith's acquire.go
	Leader   Kind = "leader"   // an election leader's proclaimed value: see locksmith.Term.Proclaim
)

// CheckKey returns why key may not name a lock, or nil if it may. The
// reason has no package prefix: the caller wraps it in its own error.
func CheckKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case strings.HasPrefix(key, Mark):
		return fmt.Errorf("key %q starts with %q, which is reserved for the keys that locksmith keeps beside each lock",
			key, Mark)
	}
	return nil
}

// CheckPrefix returns why prefix may not prefix lock keys, or nil if it
// may: a '{' in it must open a whole hash tag, so that every lock key and
// its companions take their slot from that tag. The reason has no package
// prefix: the caller wraps it in its own error.
func CheckPrefix(prefix string) error {
	if strings.IndexByte(prefix, '{') >= 0 && HashTag(prefix) == "" {
		return fmt.Errorf("prefix %q has a '{' that opens no hash tag; use a whole one, such as {app}:, or no braces",
			prefix)
	}
	return nil
}

// Companion returns the name of the companion of kind of the lock on key
// under prefix, both already checked by CheckKey and CheckPrefix: see the
// key layout above.
func Companion(prefix, key string, kind Kind) string {
	rkey := prefix + key
	head := prefix + Mark + string(kind)
	switch {
	case HashTag(rkey) != "":
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

// Companions returns Companion(prefix, key, a) and Companion(prefix, key,
// b) in one allocation: both names are cut from one string.
func Companions(prefix, key string, a, b Kind) (string, string) {
	rkey := prefix + key
	var both string
	n := len(prefix) + len(Mark) + len(a)
	switch {
	case HashTag(rkey) != "":
		both = prefix + Mark + string(a) + ":" + key + prefix + Mark + string(b) + ":" + key
		n += 1 + len(key)
	case strings.IndexByte(rkey, '}') < 0:
		both = prefix + Mark + string(a) + "#{" + rkey + "}" + prefix + Mark + string(b) + "#{" + rkey + "}"
		n += 3 + len(rkey)
	default:
		return Companion(prefix, key, a), Companion(prefix, key, b)
	}
	return both[:n], both[n:]
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
	want := CRC16(0, rkey) & (Slots - 1)
	sum := CRC16(0, base)
	var tail [4]byte
	for n := range 1 << 16 {
		for i := range tail {
			tail[i] = '0' + byte(n>>(12-4*i)&0xf)
		}
		if CRC16(sum, string(tail[:]))&(Slots-1) == want {
			return base + string(tail[:])
		}
	}
	panic("keyslot: no companion key in the slot of " + rkey) // unreachable: every slot is reached
}

// HashTag returns the hash tag of a Redis key, following Redis Cluster's
// rule: the text between the first '{' and the first '}' after it, if that
// text is not empty. A key with a hash tag is assigned to the cluster slot
// of its tag; any other key, to the slot of its whole text. It returns ""
// when the key has no hash tag.
func HashTag(key string) string {
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

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster slot of key: that of its hash tag if it
// has one, else that of its whole text.
func Slot(key string) int {
	if tag := HashTag(key); tag != "" {
		key = tag
	}
	return int(CRC16(0, key) & (Slots - 1))
}

// CRC16 continues the CRC-16/XMODEM checksum crc over s; Redis Cluster
// assigns a key to slot CRC16(0, key) mod Slots (or of its hash tag).
func CRC16(crc uint16, s string) uint16 {
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
