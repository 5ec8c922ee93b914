package locksmith

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
		if crc16(0, s) != xmodem(s) {
			t.Errorf("crc16(%q) = %#x, want %#x", s, crc16(0, s), xmodem(s))
		}
		if mid := len(s) / 2; crc16(crc16(0, s[:mid]), s[mid:]) != xmodem(s) {
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

// trickyKeys are keys whose braces do or do not form a hash tag.
var trickyKeys = []string{
	"", "a", "{", "}", "{}", "}{", "{}}", "{{}}", "a{}b", "{a}b", "a{b}c{d}",
	"{{a}}", "x}{y", "{a", "a}", "a{b", "a{b}", "{}a{b}", "a}{b}", "{{", "}}",
	"report:2026-11-30", "locksmith:{order:42}:ship", "{report}:2026-11-30:done",
}

func TestSlotKeyHashTag(t *testing.T) {
	for _, tc := range []struct{ key, tag string }{
		{"", ""}, {"{", ""}, {"}", ""}, {"{}", ""}, {"a{}b", ""}, {"x}{y", ""},
		{"{a}b", "a"}, {"a{b}c{d}", "b"}, {"{{a}}", "{a"}, {"a{b}", "b"},
		{"{}a{b}", ""}, {"a}{b}", "b"}, {"p:{order:42}:x", "order:42"},
	} {
		if got := hashTag(tc.key); got != tc.tag {
			t.Errorf("hashTag(%q) = %q, want %q", tc.key, got, tc.tag)
		}
	}
}

func TestSlotKey(t *testing.T) {
	for _, tc := range []struct{ rkey, want string }{
		{"report:2026-11-30", "{report:2026-11-30}:done"},
		{"locksmith:{order:42}:ship", "locksmith:{order:42}:ship:done"},
		{"a{b", "{a{b}:done"},
		{"{{a}}", "{{a}}:done"},
		{"a{b}c{d}", "a{b}c{d}:done"},
	} {
		if got := slotKey(tc.rkey, ":done"); got != tc.want {
			t.Errorf("slotKey(%q) = %q, want %q", tc.rkey, got, tc.want)
		}
	}
	// Keys no tag can match get a forced suffix.
	for _, rkey := range []string{"", "}", "a{}b", "x}{y", "{}a{b}"} {
		got := slotKey(rkey, ":done")
		if !strings.HasPrefix(got, rkey+":done") || len(got) != len(rkey)+len(":done")+4 {
			t.Errorf("slotKey(%q) = %q, want %q and four characters", rkey, got, rkey+":done")
		}
	}
}

// TestSlotKeyKeepsSlot checks every key over the alphabet {a, {, }} up to
// seven characters, and the tricky keys.
func TestSlotKeyKeepsSlot(t *testing.T) {
	keys := append([]string(nil), trickyKeys...)
	level := []string{""}
	for range 7 {
		var next []string
		for _, k := range level {
			for _, c := range []string{"a", "{", "}"} {
				next = append(next, k+c)
			}
		}
		keys = append(keys, next...)
		level = next
	}
	companions := make(map[string]string)
	for _, rkey := range keys {
		tag, tagged := redisTag(rkey)
		if hashTag(rkey) != tag {
			t.Errorf("hashTag(%q) = %q, want %q", rkey, hashTag(rkey), tag)
		}
		got := slotKey(rkey, ":done")
		if _, has := redisTag(got); has != (tagged || !(rkey == "" || strings.Contains(rkey, "}"))) {
			t.Errorf("slotKey(%q) = %q: hash tag %v", rkey, got, has)
		}
		if clusterSlot(got) != clusterSlot(rkey) {
			t.Errorf("slotKey(%q) = %q: slot %d, want %d", rkey, got, clusterSlot(got), clusterSlot(rkey))
		}
		// The one documented exception: k and "{"+k+"}".
		if other, dup := companions[got]; dup && other != rkey && rkey != "{"+other+"}" && other != "{"+rkey+"}" {
			t.Errorf("slotKey(%q) = slotKey(%q) = %q", rkey, other, got)
		}
		companions[got] = rkey
	}
}

// TestSlotKeyMatchesRedis asks a real redis-server, in cluster mode, for
// the slots: CLUSTER KEYSLOT answers only when cluster support is on.
func TestSlotKeyMatchesRedis(t *testing.T) {
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
	for _, rkey := range trickyKeys {
		if got, want := clusterSlot(rkey), slot(rkey); got != want {
			t.Errorf("clusterSlot(%q) = %d, Redis says %d", rkey, got, want)
		}
		done := slotKey(rkey, ":done")
		if got, want := slot(done), slot(rkey); got != want {
			t.Errorf("slotKey(%q) = %q: Redis puts it in slot %d, the lock key in %d", rkey, done, got, want)
		}
	}
}
