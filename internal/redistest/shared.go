package redistest

import (
	"os"
	"sync"
	"testing"
)

// startFor starts a deployment in t's temporary directory and stops it
// when t ends; it fails t if the deployment does not start.
func startFor[T interface{ Stop() }](t testing.TB, start func(dir string) (T, error)) T {
	t.Helper()
	v, err := start(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(v.Stop)
	return v
}

// sharedDeployment is a deployment started once per test binary, in a
// temporary directory of its own that is removed when it stops.
type sharedDeployment[T interface{ Stop() }] struct {
	once sync.Once
	dir  string
	v    T
	ok   bool
	err  error
}

// get starts the deployment with start on first use, and fails t if that
// failed, then or before.
func (s *sharedDeployment[T]) get(t testing.TB, what string, start func(dir string) (T, error)) T {
	t.Helper()
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "redistest-"+what+"-"); s.err != nil {
			return
		}
		if s.v, s.err = start(s.dir); s.err != nil {
			os.RemoveAll(s.dir)
			return
		}
		s.ok = true
	})
	if s.err != nil {
		t.Fatalf("redistest: shared %s: %v", what, s.err)
	}
	return s.v
}

// stop stops the deployment, if it was started, and removes its files.
func (s *sharedDeployment[T]) stop() {
	if s.ok {
		s.v.Stop()
		os.RemoveAll(s.dir)
	}
}
