//go:build unix

package main_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// No password from a Redis URL ever appears in locksmith's output, whether
// it is right, wrong, or cannot be used at all.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	secret := fmt.Sprintf("s3cret-%d", time.Now().UnixNano())
	wrong := fmt.Sprintf("wr0ng-%d", time.Now().UnixNano())
	withAuth := redistest.New(t, "--requirepass", secret)
	noAuth := redistest.Shared(t)
	dir := t.TempDir()

	for _, tc := range []struct {
		name string
		url  string
		want int // the exit status of every command
	}{
		{"right password", "redis://:" + secret + "@" + withAuth.Addr + "/0", 0},
		{"user and password", "redis://default:" + secret + "@" + withAuth.Addr + "/0", 0},
		{"wrong password", "redis://:" + wrong + "@" + withAuth.Addr + "/0", 69},
		// go-redis ignores the refusal of a password the server does not need.
		{"password not needed", "redis://:" + wrong + "@" + noAuth.Addr + "/0", 0},
		{"unreachable", "redis://:" + wrong + "@" + closedPort(t) + "/0", 69},
		{"escaped password", "redis://:" + url.PathEscape(wrong+"/:@") + "@" + closedPort(t) + "/0", 69},
		{"unparsable URL", "redis://:" + wrong + "/x@" + withAuth.Addr + "/0", 64},
		{"bad database", "redis://:" + wrong + "@" + withAuth.Addr + "/nine", 64},
	} {
		env := []string{"REDIS_URL=" + tc.url}
		// Started together, as some take a while to give up; on keys of
		// their own, so that they do not stand in each other's way.
		procs := []*proc{
			start(t, env, "run", "--key", uniqueKey(t), "--", "touch", dir+"/ran"),
			start(t, nil, "run", "--redis", tc.url, "--key", uniqueKey(t), "--", "touch", dir+"/ran"),
			start(t, env, "status", "--key", uniqueKey(t), "--json"),
			start(t, env, "release", "--key", uniqueKey(t), "--force"),
			start(t, env, "run", "--log-format", "json", "--key", uniqueKey(t), "--", "touch", dir+"/ran"),
			start(t, env, "ls", "--json", "--prefix", uniqueKey(t)+":"),
			start(t, env, "run", "--help"),
		}
		for i, p := range procs {
			want := tc.want
			if i == len(procs)-1 {
				want = 0 // help
			}
			code := p.wait(t, 30*time.Second)
			stdout, stderr := p.out(t), p.errOut(t)
			if code != want {
				t.Errorf("%s: locksmith %q: exit %d, want %d; stderr %q", tc.name, p.cmd.Args[1:], code, want, stderr)
			}
			for _, s := range []string{secret, wrong, url.PathEscape(wrong + "/:@")} {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("%s: locksmith %q: the password %q appears in the output:\nstdout: %s\nstderr: %s",
						tc.name, p.cmd.Args[1:], s, stdout, stderr)
				}
			}
			if testing.Verbose() && stderr != "" {
				t.Logf("%s: %s", tc.name, strings.TrimSpace(stderr))
			}
		}
	}
}
