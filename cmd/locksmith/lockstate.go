package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockState is a lock as Redis has it: what status prints, and what
// release --force deleted.
type lockState struct {
	Key      string `json:"key"`       // as given, without the prefix
	RedisKey string `json:"redis_key"` // prefix + key
	Held     bool   `json:"held"`
	// Token identifies the holder's acquisition; its COMMAND has it as
	// LOCKSMITH_TOKEN.
	Token string `json:"token,omitempty"`
	// TTLMillis is the remaining time to live in milliseconds, or -1 when
	// the key has no expiry (it was not set by locksmith). Absent when the
	// lock is free.
	TTLMillis *int64 `json:"ttl_ms,omitempty"`
	// With fencing, the key's fence counter joins these.
}

// inspect reads the lock that c names, and deletes it too when del is
// set, in one MULTI/EXEC transaction, so that the state it returns is the
// state that was deleted.
func inspect(ctx context.Context, client *redis.Client, c *connFlags, del bool) (lockState, error) {
	st := lockState{Key: c.key, RedisKey: c.prefix + c.key}
	var (
		get  *redis.StringCmd
		pttl *redis.DurationCmd
	)
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, st.RedisKey)
		pttl = p.PTTL(ctx, st.RedisKey)
		if del {
			p.Del(ctx, st.RedisKey)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, err
	}
	token, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return st, nil
	case err != nil:
		return st, err
	}
	ms := int64(-1)
	if d := pttl.Val(); d >= 0 {
		ms = d.Milliseconds()
	}
	st.Held, st.Token, st.TTLMillis = true, token, &ms
	return st, nil
}

// name names the lock in messages.
func (st lockState) name() string {
	return fmt.Sprintf("lock %q (Redis key %q)", st.Key, st.RedisKey)
}

// describe returns st in words, for a person.
func (st lockState) describe() string {
	if !st.Held {
		return st.name() + " is free"
	}
	return fmt.Sprintf("%s is held by token %q, %s", st.name(), st.Token, st.remaining())
}

// remaining describes the remaining TTL of a held lock.
func (st lockState) remaining() string {
	if *st.TTLMillis < 0 {
		return "with no expiry (not set by locksmith)"
	}
	return fmt.Sprintf("%v left", time.Duration(*st.TTLMillis)*time.Millisecond)
}
