// Package leakcheck is the goroutine-leak check that every test binary of
// this module runs after its tests: every goroutine the library starts has
// an owner that stops it and waits for it (Locker.Close, Lock.Release), so
// once the tests have closed what they made, none may be left. The check
// looks once; it does not wait for goroutines to finish.
package leakcheck

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// After reports goroutines left running once the tests of a binary have
// passed (code 0), and returns the exit code to use: code, or 1 if some
// goroutine was left. Call it with m.Run's result after stopping the
// shared servers.
func After(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
