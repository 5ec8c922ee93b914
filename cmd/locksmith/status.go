package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
)

// statusFlags are the flags of the status command.
type statusFlags struct {
	connFlags
	json bool
}

func statusFlagSet(f *statusFlags) *flag.FlagSet {
	set := newFlagSet("status")
	f.connFlags.register(set)
	set.BoolVar(&f.json, "json", false, "print one JSON object rather than text")
	return set
}

// status implements "locksmith status".
func (u *ui) status(args []string) int {
	var f statusFlags
	set := statusFlagSet(&f)
	if code, ok := u.parseFlags(set, "status", args); !ok {
		return code
	}
	if err := f.check(); err != nil {
		return u.usageError("status", err)
	}
	if set.NArg() > 0 {
		return u.usageError("status", fmt.Errorf("unexpected argument %q", set.Arg(0)))
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("status", err)
	}
	defer client.Close()

	locker := locksmith.New(client, locksmith.WithPrefix(f.prefix))
	defer locker.Close()
	ctx := context.Background()
	var st interface{ describe(time.Time) string }
	s, err := locker.Inspect(ctx, f.key)
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		// Not a lock's string: a sorted set, of a read-write lock or of a
		// semaphore (run --limit)? Each Inspect refuses the other's.
		if rs, rerr := locker.RWMutex(f.key).Inspect(ctx); rerr == nil {
			st, err = newRWState(&f.connFlags, rs), nil
		} else if ss, serr := locker.Semaphore(f.key, 1).Inspect(ctx); serr == nil {
			st, err = newSemaphoreState(&f.connFlags, ss), nil
		}
	} else if err == nil {
		st = newLockState(&f.connFlags, s)
	}
	if err != nil {
		u.errorf("cannot read lock %q from Redis at %s: %s", f.key, addr, errText(err))
		return exitRedis
	}
	if f.json {
		out, err := json.Marshal(st)
		if err != nil {
			panic(err) // lockState always marshals
		}
		fmt.Fprintf(u.stdout, "%s\n", out)
		return exitOK
	}
	fmt.Fprintln(u.stdout, st.describe(time.Now()))
	return exitOK
}
