package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Defaults of the flags every command shares.
const (
	defaultPrefix      = "locksmith:"
	defaultURL         = "redis://localhost:6379/0"
	defaultDialTimeout = 5 * time.Second
	defaultTimeout     = 3 * time.Second
)

// connFlags are the flags every command shares: which lock, and where
// Redis is.
type connFlags struct {
	key         string   // the first --key
	keys        []string // every --key, in the order given; only run takes several
	redisURL    string   // empty: $REDIS_URL, else defaultURL
	cluster     bool     // redisURL names Redis Cluster nodes
	prefix      string
	dialTimeout time.Duration
	timeout     time.Duration
}

func (c *connFlags) register(set *flag.FlagSet) {
	set.Var(keyFlag{c}, "key", "`KEY` naming the lock, without the prefix (required)")
	c.registerRedis(set)
}

// keyFlag is the value of --key, which may be given more than once: every
// value goes to keys, and the first to key.
type keyFlag struct{ c *connFlags }

func (k keyFlag) String() string {
	if k.c == nil {
		return "" // the zero value that flag.PrintDefaults makes
	}
	return k.c.key
}

func (k keyFlag) Set(s string) error {
	if len(k.c.keys) == 0 {
		k.c.key = s
	}
	k.c.keys = append(k.c.keys, s)
	return nil
}

// registerRedis registers the flags that say where Redis is, for a
// command whose key has a flag of another name (elect --name).
func (c *connFlags) registerRedis(set *flag.FlagSet) {
	// The default is not taken from $REDIS_URL here, so that help never
	// prints a URL with its password.
	set.StringVar(&c.redisURL, "redis", "", "Redis `URL` (default $REDIS_URL, else "+defaultURL+")")
	set.BoolVar(&c.cluster, "cluster", false, "the URL names nodes of a Redis Cluster (see 'locksmith help')")
	set.StringVar(&c.prefix, "prefix", defaultPrefix, "`PREFIX` of the lock's Redis key")
	set.DurationVar(&c.dialTimeout, "dial-timeout", defaultDialTimeout, "how long to wait for a connection to Redis, TLS handshake included")
	set.DurationVar(&c.timeout, "timeout", defaultTimeout, "how long to wait for each Redis command's reply")
}

// check reports a missing or invalid shared flag, for a command that
// takes one key.
func (c *connFlags) check() error {
	if c.key == "" {
		return errors.New("--key is required")
	}
	if len(c.keys) > 1 {
		return fmt.Errorf("--key given %d times: this command takes one key (only run takes several)", len(c.keys))
	}
	return c.checkRedis()
}

// checkKeys reports a missing or invalid shared flag, for run, which
// takes one key or several.
func (c *connFlags) checkKeys() error {
	if len(c.keys) < 2 {
		return c.check()
	}
	for i, k := range c.keys {
		switch {
		case k == "":
			return fmt.Errorf("--key %d of %d is empty", i+1, len(c.keys))
		case strings.ContainsFunc(k, unicode.IsSpace):
			return fmt.Errorf("--key %q: with several keys, a key cannot contain white space, which separates them in LOCKSMITH_KEYS", k)
		case slices.Contains(c.keys[:i], k):
			return fmt.Errorf("--key %q given twice", k)
		}
	}
	return c.checkRedis()
}

// checkRedis reports an invalid flag of those registerRedis registers.
func (c *connFlags) checkRedis() error {
	switch {
	case c.dialTimeout <= 0:
		return fmt.Errorf("--dial-timeout %v is not positive", c.dialTimeout)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout %v is not positive", c.timeout)
	}
	return nil
}

// newFlagSet returns an empty flag set for the named command that reports
// nothing itself: parseFlags does.
func newFlagSet(name string) *flag.FlagSet {
	set := flag.NewFlagSet("locksmith "+name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	set.Usage = func() {}
	return set
}

// parseFlags parses args with set. When it returns false, the command must
// stop and exit with the returned status: help was asked for (and printed)
// or the flags were wrong (and the error printed).
func (u *ui) parseFlags(set *flag.FlagSet, name string, args []string) (int, bool) {
	err := set.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(u.stdout, commandHelp[name]())
		return exitOK, false
	default:
		return u.usageError(name, err), false
	}
}

// usageError reports a usage error of the named command and returns
// exitUsage.
func (u *ui) usageError(name string, err error) int {
	u.errorf("%s: %v\nRun 'locksmith help %s' for usage.", name, err, name)
	return exitUsage
}

// formatFlags lists the flags in set for a help text, with their defaults.
func formatFlags(set *flag.FlagSet) string {
	var b strings.Builder
	set.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if arg != "" {
			fmt.Fprintf(&b, " %s", strings.ToUpper(arg))
		}
		fmt.Fprintf(&b, "\n        %s", usage)
		switch def := f.DefValue; {
		case def == "" || def == "false" || def == "0s":
		case isString(f):
			fmt.Fprintf(&b, " (default %q)", def)
		default:
			fmt.Fprintf(&b, " (default %s)", def)
		}
		b.WriteString("\n")
	})
	return b.String()
}

func isString(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(string)
	return ok
}
