package keyslot

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// xmodem is CRC-16/XMODEM, the checksum Redis Cluster assigns slots with,
// written again from its definition, table-driven, to check crc16.
func xmodem(s string) uint16 {
	var table [256]uint16
	for i := range table {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		table[i] = c
	}
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^s[i]]
	}
	return crc
}

// redisTag is the hash tag part of Redis' keyHashSlot (cluster.c),
// transcribed on its own rather than built on hashTag, so that it can
// check it.
func redisTag(key string) (string, bool) {
	s := 0
	for s < len(key) && key[s] != '{' {
		s++
	}
	if s == len(key) {
		return "", false
	}
	e := s + 1
	for e < len(key) && key[e] != '}' {
		e++
	}
	if e == len(key) || e == s+1 {
		return "", false
	}
	return key[s+1 : e], true
}

// clusterSlot returns the Redis Cluster slot of key.
func clusterSlot(key string) int {
	if tag, ok := redisTag(key); ok {
		return int(xmodem(tag) & 16383)
	}
	return int(xmodem(key) & 16383)
}

func TestClusterSlotKnownValues(t *testing.T) {
	if got := xmodem("123456789"); got != 0x31C3 {
		t.Fatalf("xmodem check value = %#x, want 0x31c3", got)
	}
	for _, s := range append([]string{"", "123456789"}, trickyKeys...) {
		if CRC16(0, s) != xmodem(s) {
			t.Errorf("CRC16(%q) = %#x, want %#x", s, CRC16(0, s), xmodem(s))
		}
		if mid := len(s) / 2; CRC16(CRC16(0, s[:mid]), s[mid:]) != xmodem(s) {
			t.Errorf("crc16 continued over %q does not match", s)
		}
	}
	// From the Redis Cluster specification and CLUSTER KEYSLOT's manual.
	for key, want := range map[string]int{"foo": 12182, "somekey": 11058, "foo{hash_tag}": 2515, "{hash_tag}": 2515} {
		if got := clusterSlot(key); got != want {
			t.Errorf("clusterSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// kinds are all the kinds of companion.
var kinds = []Kind{Queue, Fence, Done, Released, Leader}

// trickyKeys are keys whose braces do or do not form a hash tag.
var trickyKeys = []string{
	"", "a", "{", "}", "{}", "}{", "{}}", "{{}}", "a{}b", "{a}b", "a{b}c{d}",
	"{{a}}", "x}{y", "{a", "a}", "a{b", "a{b}", "{}a{b}", "a}{b}", "{{", "}}",
	"report:2026-11-30", "locksmith:{order:42}:ship", "{report}:2026-11-30:done",
}

// TestSlot checks Slot against clusterSlot, written on its own.
func TestSlot(t *testing.T) {
	for _, key := range append(trickyKeys, "foo", "somekey", "foo{hash_tag}", "{hash_tag}") {
		if got, want := Slot(key), clusterSlot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestHashTag(t *testing.T) {
	for _, tc := range []struct{ key, tag string }{
		{"", ""}, {"{", ""}, {"}", ""}, {"{}", ""}, {"a{}b", ""}, {"x}{y", ""},
		{"{a}b", "a"}, {"a{b}c{d}", "b"}, {"{{a}}", "{a"}, {"a{b}", "b"},
		{"{}a{b}", ""}, {"a}{b}", "b"}, {"p:{order:42}:x", "order:42"},
	} {
		if got := HashTag(tc.key); got != tc.tag {
			t.Errorf("HashTag(%q) = %q, want %q", tc.key, got, tc.tag)
		}
	}
}

func TestCompanionNames(t *testing.T) {
	for _, tc := range []struct{ prefix, key, want string }{
		{"", "report:2026-11-30", "~done#{report:2026-11-30}"},
		{"locksmith:", "report", "locksmith:~done#{locksmith:report}"},
		{"locksmith:", "order:{42}:ship", "locksmith:~done:order:{42}:ship"},
		{"{app}:", "report", "{app}:~done:report"},
		{"", "a{b", "~done#{a{b}"},
		{"", "{{a}}", "~done:{{a}}"},
		{"p:", "a{b}c{d}", "p:~done:a{b}c{d}"},
		{"", "x", "~done#{x}"},
		{"", "{x}", "~done:{x}"},
	} {
		if got := Companion(tc.prefix, tc.key, Done); got != tc.want {
			t.Errorf("Companion(%q, %q) = %q, want %q", tc.prefix, tc.key, got, tc.want)
		}
	}
	// Keys no tag can match get a forced suffix.
	for _, key := range []string{"}", "a{}b", "x}{y", "{}a{b}"} {
		got := Companion("p:", key, Done)
		if base := "p:~done%" + key; !strings.HasPrefix(got, base) || len(got) != len(base)+4 {
			t.Errorf("Companion(%q) = %q, want %q and four characters", key, got, base)
		}
	}
}

// TestCompanions checks that Companions names what two Companion calls
// name, in every layout (a tag in the key, in the prefix, none, and a key
// no tag can match), and that it allocates once.
func TestCompanions(t *testing.T) {
	for _, tc := range []struct{ prefix, key string }{
		{"", "report:2026-11-30"}, {"locksmith:", "report"}, {"locksmith:", "order:{42}:ship"},
		{"{app}:", "report"}, {"", "a{b"}, {"", "{{a}}"}, {"p:", "a{b}c{d}"}, {"", "x"},
		{"", "}"}, {"p:", "a{}b"}, {"p:", "x}{y"},
	} {
		q, r := Companions(tc.prefix, tc.key, Queue, Released)
		if wq, wr := Companion(tc.prefix, tc.key, Queue), Companion(tc.prefix, tc.key, Released); q != wq || r != wr {
			t.Errorf("Companions(%q, %q) = %q, %q, want %q, %q", tc.prefix, tc.key, q, r, wq, wr)
		}
	}
	var q, r string
	if n := testing.AllocsPerRun(100, func() { q, r = Companions("locksmith:", "order:42", Queue, Released) }); n != 1 {
		t.Errorf("Companions allocated %v times, want 1 (%q, %q)", n, q, r)
	}
}

func TestCheckKeyAndPrefix(t *testing.T) {
	for _, key := range []string{"", "~", "~queue:x", "~done#{x}"} {
		if err := CheckKey(key); err == nil {
			t.Errorf("CheckKey(%q) = nil, want a reason", key)
		}
	}
	for _, key := range []string{"x", "{x}", "a~b", "x~", "}"} {
		if err := CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
	for _, prefix := range []string{"{", "a{", "{}", "a{}:", "}{"} {
		if err := CheckPrefix(prefix); err == nil {
			t.Errorf("CheckPrefix(%q) = nil, want a reason", prefix)
		}
	}
	for _, prefix := range []string{"", "locksmith:", "{app}:", "}", "a}b", "{a}{", "x{y}z"} {
		if err := CheckPrefix(prefix); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", prefix, err)
		}
	}
}

// layoutKeys returns every key over the alphabet {a, {, }, ~, #} up to n
// characters, then the tricky keys and keys shaped like companions, each
// once.
func layoutKeys(n int) []string {
	keys := []string{""}
	level := []string{""}
	for range n {
		var next []string
		for _, k := range level {
			for _, c := range []string{"a", "{", "}", "~", "#"} {
				next = append(next, k+c)
			}
		}
		keys = append(keys, next...)
		level = next
	}
	keys = append(keys, trickyKeys...)
	keys = append(keys, "queue:x", "~queue:x", "x:~queue", "%a}", "#{a}", ":{a}", "a%}", "queue#{a}", "~done%}1234")
	seen := make(map[string]bool)
	unique := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			unique = append(unique, k)
		}
	}
	return unique
}

// TestCompanionLayout checks, for every valid prefix and key over a small
// alphabet, that every companion starts with the prefix, lives in the lock
// key's slot, and belongs to one lock only: no two (key, kind) pairs of a
// prefix share a name, and no lock key equals another lock's companion.
func TestCompanionLayout(t *testing.T) {
	prefixes := []string{"", "p:", "}", "{t}:", "a{b}c"}
	keys := layoutKeys(4)
	for _, prefix := range prefixes {
		if err := CheckPrefix(prefix); err != nil {
			t.Fatalf("CheckPrefix(%q): %v", prefix, err)
		}
		owner := make(map[string]string) // companion name -> key and kind
		var lockKeys []string
		for _, key := range keys {
			if CheckKey(key) != nil {
				continue
			}
			rkey := prefix + key
			lockKeys = append(lockKeys, rkey)
			for _, kind := range kinds {
				got := Companion(prefix, key, kind)
				if !strings.HasPrefix(got, prefix) {
					t.Errorf("Companion(%q, %q, %s) = %q: does not start with the prefix", prefix, key, kind, got)
				}
				if clusterSlot(got) != clusterSlot(rkey) {
					t.Errorf("Companion(%q, %q, %s) = %q: slot %d, want %d", prefix, key, kind, got, clusterSlot(got), clusterSlot(rkey))
				}
				if other, dup := owner[got]; dup {
					t.Errorf("Companion(%q, %q, %s) = %q, as for %s", prefix, key, kind, got, other)
				}
				owner[got] = key + " " + string(kind)
			}
		}
		for _, rkey := range lockKeys {
			if other, dup := owner[rkey]; dup {
				t.Errorf("lock key %q is the companion of %s", rkey, other)
			}
		}
	}
}

// TestCompanionMatchesRedis asks a real redis-server, in cluster mode, for
// the slots: CLUSTER KEYSLOT answers only when cluster support is on.
func TestCompanionMatchesRedis(t *testing.T) {
	srv := redistest.New(t, "--cluster-enabled", "yes")
	c := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	slot := func(key string) int {
		t.Helper()
		n, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		return int(n)
	}
	for _, prefix := range []string{"", "locksmith:", "{app}:"} {
		for _, key := range trickyKeys {
			if CheckKey(key) != nil {
				continue
			}
			rkey := prefix + key
			if got, want := clusterSlot(rkey), slot(rkey); got != want {
				t.Errorf("clusterSlot(%q) = %d, Redis says %d", rkey, got, want)
			}
			for _, kind := range kinds {
				name := Companion(prefix, key, kind)
				if got, want := slot(name), slot(rkey); got != want {
					t.Errorf("Companion(%q, %q) = %q: Redis puts it in slot %d, the lock key in %d", prefix, key, name, got, want)
				}
			}
		}
	}
}
