package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
)

// releaseFlags are the flags of the release command.
type releaseFlags struct {
	connFlags
	force bool
}

func releaseFlagSet(f *releaseFlags) *flag.FlagSet {
	set := newFlagSet("release")
	f.connFlags.register(set)
	set.BoolVar(&f.force, "force", false, "really delete the lock, whoever holds it (required)")
	return set
}

// release implements "locksmith release": the operator's way to delete a
// lock whose holder is stuck. It needs --force because the holder is not
// asked: it finds out at its next renewal.
func (u *ui) release(args []string) int {
	var f releaseFlags
	set := releaseFlagSet(&f)
	if code, ok := u.parseFlags(set, "release", args); !ok {
		return code
	}
	if err := f.check(); err != nil {
		return u.usageError("release", err)
	}
	if set.NArg() > 0 {
		return u.usageError("release", fmt.Errorf("unexpected argument %q", set.Arg(0)))
	}
	if !f.force {
		return u.usageError("release", errors.New("refusing to delete the lock without --force: "+
			"it is deleted whoever holds it, and a holder running under locksmith run has its command stopped"))
	}
	client, addr, err := u.connect(&f.connFlags)
	if err != nil {
		return u.usageError("release", err)
	}
	defer client.Close()

	st, err := deleteLock(context.Background(), client, &f.connFlags)
	if err != nil {
		u.errorf("cannot delete lock %q from Redis at %s: %v", f.key, addr, err)
		return exitRedis
	}
	if !st.Held {
		fmt.Fprintf(u.stdout, "%s is free; nothing deleted\n", st.name())
		return exitOK
	}
	if st.otherKind {
		fmt.Fprintf(u.stdout, "deleted %s, which had just become a semaphore or a read-write lock\n", st.name())
		return exitOK
	}
	fmt.Fprintf(u.stdout, "deleted %s, held by %s%s, %s\n", st.name(), tokenText("", st.Mark), setText(st.SetSize), st.remaining())
	if st.SetSize > 0 {
		fmt.Fprintf(u.stdout, "the set's other %d keys stay held by %s until its holder releases them or they expire\n",
			st.SetSize-1, tokenText("", st.Mark))
	}
	return exitOK
}
