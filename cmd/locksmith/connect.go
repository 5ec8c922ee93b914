package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURLEnv names the environment variable read when --redis is not
// given. A URL there, unlike one in argv, is not shown by ps.
const redisURLEnv = "REDIS_URL"

// urlForm is the form of a Redis URL, for messages.
const urlForm = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], rediss://... for TLS, or unix:///PATH; " +
	"with --cluster, redis://HOST:PORT?addr=HOST2:PORT2... for Redis Cluster; " +
	"redis://SENTINEL:PORT?master_name=NAME&addr=SENTINEL2:PORT2... for Sentinel"

// flagParams are the URL parameters that go-redis would take but that
// locksmith sets from its flags, with the flag to use instead.
var flagParams = map[string]string{
	"dial_timeout":   "--dial-timeout",
	"read_timeout":   "--timeout",
	"write_timeout":  "--timeout",
	"max_retries":    "",
	"dialer_retries": "",
}

// connect returns a client of the Redis deployment that c names, with c's
// timeouts, and a description of where it is to show in messages: a
// server, a Redis Cluster (--cluster) or the master that Sentinel names
// (a URL with master_name). Before parsing the URL it adds the passwords
// in it to u.secrets, so that no message shows them, and its error never
// quotes the URL. It does no I/O: the first command connects.
func (u *ui) connect(c *connFlags) (redis.UniversalClient, string, error) {
	raw, source := c.redisURL, "--redis"
	if raw == "" {
		raw, source = os.Getenv(redisURLEnv), "$"+redisURLEnv
	}
	if raw == "" {
		raw, source = defaultURL, "the default URL"
	}
	u.secrets = append(u.secrets, urlSecrets(raw)...)
	parsed, err := url.Parse(raw)
	if err != nil {
		return nil, "", invalidURL(source, err)
	}
	sentinel, err := deploymentKind(parsed, c.cluster)
	if err != nil {
		return nil, "", fmt.Errorf("the Redis URL in %s: %w", source, err)
	}
	// Every form gets the same settings: the dialer, one dial per
	// connection (DialerRetries 1) and no command retries (MaxRetries -1).
	// With go-redis's defaults a dial that cannot complete took five times
	// --dial-timeout, and a command up to four such dials; the Locker
	// retries a failed renewal itself. A Cluster client still follows
	// MOVED and ASK, and tries other nodes, up to its MaxRedirects.
	switch {
	case c.cluster:
		opts, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, "", invalidURL(source, err)
		}
		opts.Dialer = dialer(c.dialTimeout, opts.TLSConfig)
		opts.DialTimeout, opts.DialerRetries, opts.MaxRetries = c.dialTimeout, 1, -1
		opts.ReadTimeout, opts.WriteTimeout = c.timeout, c.timeout
		return redis.NewClusterClient(opts), "Cluster " + strings.Join(opts.Addrs, ","), nil
	case sentinel:
		opts, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, "", invalidURL(source, err)
		}
		if opts.MasterName == "" {
			return nil, "", fmt.Errorf("the Redis URL in %s: master_name is empty; want %s", source, urlForm)
		}
		opts.Dialer = dialer(c.dialTimeout, opts.TLSConfig)
		opts.DialTimeout, opts.DialerRetries, opts.MaxRetries = c.dialTimeout, 1, -1
		opts.ReadTimeout, opts.WriteTimeout = c.timeout, c.timeout
		where := fmt.Sprintf("master %q via sentinels %s", opts.MasterName, strings.Join(opts.SentinelAddrs, ","))
		return redis.NewFailoverClient(opts), where, nil
	default:
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, "", invalidURL(source, err)
		}
		opts.Dialer = dialer(c.dialTimeout, opts.TLSConfig)
		opts.DialTimeout, opts.DialerRetries, opts.MaxRetries = c.dialTimeout, 1, -1
		opts.ReadTimeout, opts.WriteTimeout = c.timeout, c.timeout
		return redis.NewClient(opts), opts.Addr, nil
	}
}

// deploymentKind reports whether the URL u names Sentinel (it has a
// master_name), given whether --cluster says that it names Redis Cluster
// nodes, and rejects a URL that could mean more than one deployment or
// sets what locksmith's flags set.
func deploymentKind(u *url.URL, cluster bool) (sentinel bool, err error) {
	q := u.Query()
	for name, flag := range flagParams {
		switch {
		case !q.Has(name):
		case flag == "":
			return false, fmt.Errorf("%s is set by locksmith, not by the URL", name)
		default:
			return false, fmt.Errorf("%s is set by %s, not by the URL", name, flag)
		}
	}
	sentinel = q.Has("master_name")
	switch {
	case cluster && sentinel:
		return false, errors.New("--cluster and master_name both given: " +
			"give --cluster for Redis Cluster nodes, or master_name for the sentinels of a master, not both")
	case (cluster || sentinel) && u.Scheme == "unix":
		return false, errors.New("a unix:// URL names one server; --cluster and master_name need redis:// or rediss://")
	case cluster && strings.Trim(u.Path, "/") != "" && strings.Trim(u.Path, "/") != "0":
		return false, errors.New("a Redis Cluster has database 0 only; drop the /DB from the URL")
	case !cluster && !sentinel && q.Has("addr"):
		return false, errors.New("addr lists more servers: give --cluster if they are Redis Cluster nodes, " +
			"or master_name if they are sentinels")
	}
	return sentinel, nil
}

// invalidURL returns the error for a Redis URL from source that go-redis
// could not parse.
func invalidURL(source string, err error) error {
	// url.Parse's errors quote the URL, and even the reason alone may
	// quote a part of a password it failed to parse.
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("invalid Redis URL in %s (not shown, as it may hold a password); want %s", source, urlForm)
	}
	return fmt.Errorf("invalid Redis URL in %s: %w", source, err)
}

// urlSecrets returns the passwords in raw, as written and decoded, if raw
// parses as a URL with any: the one in its user info (a sentinel's when
// the URL has a master_name) and the value of a password parameter (the
// master's, with master_name).
func urlSecrets(raw string) []string {
	parsed, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var secrets []string
	if pw, ok := parsed.User.Password(); ok {
		secrets = append(secrets, pw)
		if _, escaped, ok := strings.Cut(parsed.User.String(), ":"); ok && escaped != pw {
			secrets = append(secrets, escaped)
		}
	}
	// By hand rather than with parsed.Query, which drops a pair that it
	// cannot unescape, though go-redis may still report it.
	for pair := range strings.SplitSeq(parsed.RawQuery, "&") {
		name, value, _ := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if !strings.Contains(name, "password") || value == "" {
			continue
		}
		secrets = append(secrets, value)
		if v, err := url.QueryUnescape(value); err == nil && v != value {
			secrets = append(secrets, v)
		}
	}
	return secrets
}
