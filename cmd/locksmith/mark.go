package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// tokenMark returns a short mark of a lock token, for screens and logs: the
// first five bytes of the token's SHA-256, in hex. Two holders' marks
// differ (a collision takes about a million holders of one key), and the
// token cannot be read back from it. A token is the capability to renew
// or release its holder's lock, so status prints marks unless asked for
// tokens (--show-token).
func tokenMark(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:5])
}

// tokenText names a holder in words: by its token when it is shown, by
// its mark otherwise.
func tokenText(token, mark string) string {
	if token != "" {
		return fmt.Sprintf("token %q", token)
	}
	return "token #" + mark
}
