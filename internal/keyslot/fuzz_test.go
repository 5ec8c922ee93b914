package keyslot

import (
	"strings"
	"testing"
)

// checkKnownSlots checks CRC16, HashTag and Slot against the examples of
// the Redis Cluster specification and CLUSTER KEYSLOT's manual.
func checkKnownSlots(tb testing.TB) {
	tb.Helper()
	if got := CRC16(0, "123456789"); got != 0x31C3 {
		tb.Fatalf("CRC16(0, %q) = %#x, want 0x31c3", "123456789", got)
	}
	for key, want := range map[string]int{"foo": 12182, "somekey": 11058, "foo{hash_tag}": 2515, "{hash_tag}": 2515} {
		if got := Slot(key); got != want {
			tb.Fatalf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	for key, tag := range map[string]string{
		"{user1000}.following": "user1000", "foo{}{bar}": "", "foo{{bar}}zap": "{bar", "foo{bar}{zap}": "bar",
	} {
		if got := HashTag(key); got != tag {
			tb.Fatalf("HashTag(%q) = %q, want %q", key, got, tag)
		}
	}
}

// A lockName is a lock's key with its prefix, and its companions of each
// kind, in the order of kinds.
type lockName struct {
	prefix, key string
	companions  []string
}

// FuzzCompanions checks the layout's promises on two prefixes and two
// keys, and the four lock names they make (each prefix with each key):
// every companion starts with its prefix and lives in its lock key's
// slot; the companions of one prefix's distinct locks, of any kinds, are
// distinct, and none is a lock key of that prefix.
//
// Across prefixes the promise is narrower, as two prefixes can nest. A
// Locker whose prefix is a proper prefix of another's names the other's
// companions as lock keys, as one with no prefix names every key; and
// two prefixes of which one extends the other by a text that starts with
// Mark (such as "" and "~queue:a") can give two locks the same companion,
// or make one lock's companion the other's lock key. Other pairs of
// prefixes keep their names apart.
func FuzzCompanions(f *testing.F) {
	checkKnownSlots(f)
	for _, seed := range [][4]string{
		{"", "", "a", "b"},
		{"", "locksmith:", "report", "report"},
		{"{app}:", "", "{", "}"},
		{"{app}:", "app:", "a}b", "{}"},
		{"p:", "}", "{a}b", "x}{y"},
		{"a{b}c", "{t}:", "}", "{{a}}"},
		{"", "p:", "p:x", "x"},                 // one lock key under two prefixes
		{"", "", "~queue:x", "x"},              // a key shaped like a companion, refused
		{"{", "a{}:", "x", "{x}"},              // prefixes refused
		{"", "~queue:a", "a~fence:{t}", "{t}"}, // nested prefixes that share a companion
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, prefixA, prefixB, keyA, keyB string) {
		var locks []lockName
		for _, prefix := range distinct(prefixA, prefixB) {
			if CheckPrefix(prefix) != nil {
				continue
			}
			for _, key := range distinct(keyA, keyB) {
				if CheckKey(key) == nil {
					locks = append(locks, checkedLock(t, prefix, key))
				}
			}
		}
		for i, a := range locks {
			for _, b := range locks[i+1:] {
				checkApart(t, a, b)
				checkApart(t, b, a)
			}
		}
	})
}

// checkedLock returns the lock name of key under prefix, both valid, and
// checks each of its companions: it starts with the prefix, lives in the
// lock key's slot, and differs from the lock key and the other kinds'.
func checkedLock(t *testing.T, prefix, key string) lockName {
	t.Helper()
	rkey := prefix + key
	slot := Slot(rkey)
	if want := clusterSlot(rkey); slot != want {
		t.Fatalf("Slot(%q) = %d, want %d", rkey, slot, want)
	}
	lk := lockName{prefix: prefix, key: key}
	for _, kind := range kinds {
		c := Companion(prefix, key, kind)
		switch {
		case !strings.HasPrefix(c, prefix):
			t.Fatalf("Companion(%q, %q, %s) = %q: does not start with the prefix", prefix, key, kind, c)
		case Slot(c) != slot:
			t.Fatalf("Companion(%q, %q, %s) = %q: slot %d, want %d", prefix, key, kind, c, Slot(c), slot)
		case c == rkey:
			t.Fatalf("Companion(%q, %q, %s) = %q, the lock key", prefix, key, kind, c)
		}
		for j, other := range lk.companions {
			if other == c {
				t.Fatalf("Companion(%q, %q, %s) = %q, as for %s", prefix, key, kind, c, kinds[j])
			}
		}
		lk.companions = append(lk.companions, c)
	}
	return lk
}

// distinct returns a and b, or only a if they are equal.
func distinct(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

// checkApart checks that no companion of a is b's lock key, or one of b's
// companions, where the layout promises it (see FuzzCompanions).
func checkApart(t *testing.T, a, b lockName) {
	t.Helper()
	if a.prefix+a.key == b.prefix+b.key {
		return // one lock, named under two prefixes
	}
	shorter := a.prefix != b.prefix && strings.HasPrefix(a.prefix, b.prefix)
	nested := strings.HasPrefix(a.prefix, b.prefix+Mark) || strings.HasPrefix(b.prefix, a.prefix+Mark)
	for i, c := range a.companions {
		if c == b.prefix+b.key && !shorter && !nested {
			t.Fatalf("Companion(%q, %q, %s) = %q, the lock key of %q under %q",
				a.prefix, a.key, kinds[i], c, b.key, b.prefix)
		}
		for j, d := range b.companions {
			if c == d && !nested {
				t.Fatalf("Companion(%q, %q, %s) = Companion(%q, %q, %s) = %q",
					a.prefix, a.key, kinds[i], b.prefix, b.key, kinds[j], c)
			}
		}
	}
}
