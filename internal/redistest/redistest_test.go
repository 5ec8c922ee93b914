package redistest_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith/internal/redistest"
)

func TestRequirePass(t *testing.T) {
	const password = "a pass with spaces"
	srv := redistest.New(t, "--requirepass", password)
	if srv.Password != password {
		t.Errorf("Password = %q, want %q", srv.Password, password)
	}
	if err := srv.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING with the password: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { _ = anon.Close() })
	if err := anon.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := srv.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after a restart: %v", err)
	}
}

// A server that exits before answering, here on an unknown option, makes
// Start return an error rather than hang.
func TestStartServerExits(t *testing.T) {
	redistest.Require(t)
	_, err := redistest.Start(t.TempDir(), "--no-such-option", "x")
	if err == nil || !strings.Contains(err.Error(), "exited before answering") {
		t.Errorf("Start with an unknown option: %v, want an error saying the server exited", err)
	}
}
