//go:build unix

package main_test

import (
	"regexp"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help"}, {"--help"}, {"-h"},
		{"help", "run"}, {"run", "--help"}, {"run", "-h"},
		{"help", "status"}, {"status", "--help"},
		{"help", "release"}, {"release", "--help"},
	} {
		code, stdout, stderr := locksmith(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 0 and nothing", args, code, stderr)
		}
		if !strings.Contains(stdout, "Usage:") {
			t.Errorf("locksmith %q: no Usage in\n%s", args, stdout)
		}
		if len(args) == 1 {
			// The overview documents the exit statuses.
			for _, want := range []string{"Exit status:", "64 ", "69 ", "75 ", "79 ", "80 ", "REDIS_URL"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("locksmith %q: %q missing from\n%s", args, want, stdout)
				}
			}
			continue
		}
		name := args[0]
		if name == "help" {
			name = args[1]
		}
		for _, want := range []string{"Flags:", "--key KEY", "--redis URL", "Examples:", "  locksmith " + name + " "} {
			if !strings.Contains(stdout, want) {
				t.Errorf("locksmith %q: %q missing from\n%s", args, want, stdout)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--version", "version"} {
		code, stdout, _ := locksmith(t, nil, arg)
		if code != 0 || !regexp.MustCompile(`^locksmith \S+ \(go\S+ \S+/\S+\)\n$`).MatchString(stdout) {
			t.Errorf("locksmith %s: exit %d, stdout %q; want 0 and a version line", arg, code, stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := dir + "/ran"
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run", "--", "touch", marker}, "--key is required"},
		{[]string{"run", "--key", "k"}, "no COMMAND"},
		{[]string{"run", "--key", "k", "--ttl", "0s", "--", "touch", marker}, "--ttl"},
		{[]string{"run", "--key", "k", "--wait", "-1s", "--", "touch", marker}, "--wait"},
		{[]string{"run", "--key", "k", "--grace", "-1s", "--", "touch", marker}, "--grace"},
		{[]string{"run", "--key", "k", "--done-ttl", "1h", "--", "touch", marker}, "--done-ttl needs --once"},
		{[]string{"run", "--key", "k", "--once", "--done-ttl", "0s", "--", "touch", marker}, "--done-ttl 0s is under 1ms"},
		{[]string{"run", "--key", "k", "--fence-ttl", "1h", "--", "touch", marker}, "--fence-ttl needs --fencing"},
		{[]string{"run", "--key", "k", "--fencing", "--fence-ttl", "0s", "--", "touch", marker}, "--fence-ttl 0s is under 1ms"},
		{[]string{"run", "--key", "k", "--timeout", "0s", "--", "touch", marker}, "--timeout"},
		{[]string{"run", "--key", "k", "--bogus", "--", "touch", marker}, "-bogus"},
		{[]string{"run", "--key", "k", "--redis", "http://localhost/", "--", "touch", marker}, "invalid URL scheme"},
		{[]string{"status"}, "--key is required"},
		{[]string{"status", "--key", "k", "extra"}, `unexpected argument "extra"`},
		{[]string{"release", "--key", "k"}, "without --force"},
		{[]string{"run", "--key", "k", "--log-format", "xml", "--", "touch", marker}, `--log-format "xml"`},
		{[]string{"elect", "--name", "n", "--log-format", "xml", "--", "touch", marker}, `--log-format "xml"`},
		{[]string{"status", "--key", "k", "--interval", "1s"}, "--interval needs --watch"},
		{[]string{"status", "--key", "k", "--watch", "--interval", "10ms"}, "--interval 10ms is under 100ms"},
		{[]string{"ls", "--limit", "0"}, "--limit 0 is under 1"},
		{[]string{"ls", "extra"}, `unexpected argument "extra"`},
		{[]string{"ls", "--prefix", "{app:"}, "hash tag"},
	} {
		code, _, stderr := locksmith(t, nil, tc.args...)
		if code != 64 || !strings.Contains(stderr, tc.want) {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 64 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if exists(marker) {
		t.Error("a command ran despite a usage error")
	}
}

// The help of ls, status --watch and --log-format.
func TestHelpObservability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"locksmith ls ", "--watch", "list the locks held"}},
		{[]string{"help", "ls"}, []string{"Usage: locksmith ls", "--limit N", "--prefix PREFIX", "--json", "never prints a token",
			"Examples:", "  locksmith ls "}},
		{[]string{"ls", "--help"}, []string{"Usage: locksmith ls"}},
		{[]string{"help", "status"}, []string{"--watch", "--interval DURATION", "answers again"}},
		{[]string{"help", "run"}, []string{"--log-format FORMAT", "child_killed", "No token is ever written"}},
		{[]string{"help", "elect"}, []string{"--log-format FORMAT", "elected", "term_lost", "resigned"}},
	} {
		code, stdout, stderr := locksmith(t, nil, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("locksmith %q: exit %d, stderr %q; want 0 and nothing", tc.args, code, stderr)
		}
		for _, want := range tc.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("locksmith %q: %q missing from\n%s", tc.args, want, stdout)
			}
		}
	}
}
