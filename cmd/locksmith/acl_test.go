//go:build unix

package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// cliRule is the minimal ACL rule docs/acl.md gives for the command: the
// library's, with MULTI and EXEC for release --force.
var cliRule = []any{
	"resetkeys", "~locksmith:*", "resetchannels", "&locksmith:*", "-@all",
	"+hello", "+auth", "+ping",
	"+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+pexpire", "+pttl",
	"+zadd", "+zrem", "+zrangebyscore", "+zcount", "+time",
	"+publish", "+subscribe", "+unsubscribe",
	"+multi", "+exec",
}

// TestCLIMinimalRule runs every command as a user with exactly cliRule.
func TestCLIMinimalRule(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	admin := srv.Client(t)
	ctx := t.Context()
	user := fmt.Sprintf("cli%d", time.Now().UnixNano())
	args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, cliRule...)
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + user + ":pw@" + srv.Addr + "/0"
	key := uniqueKey(t)

	for _, run := range [][]string{
		{"run", "--redis", url, "--key", key, "--", "true"},
		{"run", "--redis", url, "--key", key, "--fencing", "--fence-ttl", "1h", "--", "true"},
		{"run", "--redis", url, "--key", key, "--once", "--", "true"},
		{"run", "--redis", url, "--key", key, "--wait", "5s", "--", "true"},
		{"status", "--redis", url, "--key", key},
		{"status", "--redis", url, "--key", key, "--json"},
	} {
		if code, stdout, stderr := locksmith(t, nil, run...); code != 0 {
			t.Fatalf("locksmith %s: exit %d, stdout %q, stderr %q", strings.Join(run, " "), code, stdout, stderr)
		}
	}
	if err := admin.Set(ctx, "locksmith:"+key, "stuck", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := locksmith(t, nil, "release", "--redis", url, "--key", key, "--force")
	if code != 0 || !strings.Contains(stdout, "deleted") {
		t.Fatalf("release --force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if n := admin.Exists(ctx, "locksmith:"+key).Val(); n != 0 {
		t.Fatal("release --force left the lock")
	}
}
