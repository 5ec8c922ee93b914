package locksmith

import (
	"testing"

	"github.com/google/uuid"
)

// TestRandomToken: the token is a version 4 UUID of RFC 9562 in its
// canonical text form, as uuid.NewString writes, and tokens differ.
// (BenchmarkUncontended counts what it saves: one allocation a call.)
func TestRandomToken(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		tok := randomToken()
		u, err := uuid.Parse(tok)
		if err != nil {
			t.Fatalf("randomToken() = %q: %v", tok, err)
		}
		if u.String() != tok || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("randomToken() = %q: version %d, variant %v, canonical %q", tok, u.Version(), u.Variant(), u.String())
		}
		if seen[tok] {
			t.Fatalf("randomToken() repeated %q", tok)
		}
		seen[tok] = true
	}
}
