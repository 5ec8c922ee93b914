package locksmith

import "strings"

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

// slotKey returns the name of a companion key of rkey, such as a fence
// counter or a completion record, which must live in the same Redis
// Cluster slot as rkey so that one script may touch both. suffix must
// contain no braces.
//
// If rkey has a hash tag, the companion is rkey+suffix, which keeps the
// tag. Otherwise rkey's slot is that of its whole text, and the companion
// is "{"+rkey+"}"+suffix, whose tag is rkey. That cannot work when rkey is
// empty or contains a '}' ("a}b", "x}{y", "a{}b"): a tag is not empty and
// ends at its first '}', so no tag can equal rkey. Such a key gets
// rkey+suffix followed by four characters chosen so that the whole hashes
// to rkey's slot (see forcedSlotKey).
//
// Different keys get different companions, with one exception: a key k
// without a tag and the key "{"+k+"}" (its text wrapped in braces) share
// theirs.
func slotKey(rkey, suffix string) string {
	switch {
	case hashTag(rkey) != "":
		return rkey + suffix
	case rkey == "" || strings.Contains(rkey, "}"):
		return forcedSlotKey(rkey, suffix)
	}
	return "{" + rkey + "}" + suffix
}

// forcedSlotKey returns rkey+suffix followed by four characters from
// '0' to '?' (0x30 to 0x3f), the first such name, in order, that Redis
// Cluster assigns to the slot of rkey, a key without a hash tag. The four
// characters vary 16 bits of the checksum's input, which reaches every
// slot; the name has no hash tag either, since none of them is a brace.
// Finding it takes at most 65536 short checksums, a fraction of a
// millisecond, and is only needed for keys no hash tag can match.
func forcedSlotKey(rkey, suffix string) string {
	want := crc16(0, rkey) & (clusterSlots - 1)
	base := crc16(0, rkey+suffix)
	var tail [4]byte
	for n := range 1 << 16 {
		for i := range tail {
			tail[i] = '0' + byte(n>>(12-4*i)&0xf)
		}
		if crc16(base, string(tail[:]))&(clusterSlots-1) == want {
			return rkey + suffix + string(tail[:])
		}
	}
	panic("locksmith: no companion key in the slot of " + rkey) // unreachable: every slot is reached
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
