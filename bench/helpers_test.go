package main

import (
	"os/exec"
	"testing"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

// privateDeployment starts a private redis-server for t, unpinned, as the
// benchmark starts its own, and returns a deployment on it; both stop
// when t ends. Without redis-server on PATH t is skipped, saying so, or
// fails where a real Redis is required (CI: see redistest.Require).
func privateDeployment(t *testing.T) *deployment {
	t.Helper()
	redistest.Require(t)
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startServer(t.Context(), path, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	d, err := newDeployment("test", []string{srv.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d
}
