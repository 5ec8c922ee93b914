// Package leakcheck is the goroutine-leak check that every test binary of
// this module runs after its tests: every goroutine the library starts has
// an owner that stops it and waits for it (Locker.Close, Lock.Release), so
// once the tests have closed what they made, none may be left. The check
// looks once; it does not wait for goroutines to finish, with one
// exception that is not ours: after failed dials, a go-redis pool probes
// the server from a goroutine that sleeps a second between probes and
// notices that its client was closed only when it wakes.
package leakcheck

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// ignoreDialProbe ignores go-redis's dial probe (see the package comment).
var ignoreDialProbe = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// After reports goroutines left running once the tests of a binary have
// passed (code 0), and returns the exit code to use: code, or 1 if some
// goroutine was left. Call it with m.Run's result after stopping the
// shared servers.
func After(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(ignoreDialProbe); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
