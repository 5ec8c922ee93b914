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
const urlForm = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], rediss://... for TLS, or unix:///PATH"

// connect returns a client of the Redis server that c names, with c's
// timeouts, and the server's address to show in messages. Before parsing
// the URL it adds the password in it to u.secrets, so that no message
// shows it, and its error never quotes the URL.
func (u *ui) connect(c *connFlags) (*redis.Client, string, error) {
	raw, source := c.redisURL, "--redis"
	if raw == "" {
		raw, source = os.Getenv(redisURLEnv), "$"+redisURLEnv
	}
	if raw == "" {
		raw, source = defaultURL, "the default URL"
	}
	u.secrets = append(u.secrets, urlSecrets(raw)...)
	opts, err := redis.ParseURL(raw)
	if err != nil {
		// url.Parse's errors quote the URL, and even the reason alone
		// may quote a part of a password it failed to parse.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return nil, "", fmt.Errorf("invalid Redis URL in %s (not shown, as it may hold a password); want %s", source, urlForm)
		}
		return nil, "", fmt.Errorf("invalid Redis URL in %s: %w", source, err)
	}
	if opts.Password != "" {
		u.secrets = append(u.secrets, opts.Password)
	}
	opts.DialTimeout = c.dialTimeout
	opts.ReadTimeout = c.timeout
	opts.WriteTimeout = c.timeout
	return redis.NewClient(opts), opts.Addr, nil
}

// urlSecrets returns the password in raw, as written and decoded, if raw
// parses as a URL with one.
func urlSecrets(raw string) []string {
	parsed, err := url.Parse(raw)
	if err != nil || parsed.User == nil {
		return nil
	}
	pw, ok := parsed.User.Password()
	if !ok {
		return nil
	}
	secrets := []string{pw}
	if _, escaped, ok := strings.Cut(parsed.User.String(), ":"); ok && escaped != pw {
		secrets = append(secrets, escaped)
	}
	return secrets
}
