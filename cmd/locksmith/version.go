package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version may be set when linking, with -ldflags "-X main.version=v1.2.3".
// When it is empty the module version recorded by the go command is used:
// the tag for go install ...@v1.2.3, a pseudo-version or "(devel)" for a
// build from a checkout.
var version string

// versionLine returns what --version prints.
func versionLine() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("locksmith %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
