package locksmith

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeInfo answers INFO server with run_id and uptime_in_seconds, or err.
type fakeInfo struct {
	runID  string
	uptime int64
	err    error
}

func (f fakeInfo) Info(context.Context, ...string) *redis.StringCmd {
	if f.err != nil {
		return redis.NewStringResult("", f.err)
	}
	return redis.NewStringResult(fmt.Sprintf("# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\ntcp_port:6379\r\nuptime_in_seconds:%d\r\n", f.runID, f.uptime), nil)
}

// TestUptimeIsRoundedDown: uptime_in_seconds u means the process has been
// up for more than u-1 seconds, no more is assumed; a process that has
// just started (u = 0) stays out for a second more than the maximum TTL.
func TestUptimeIsRoundedDown(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		uptime int64
		maxTTL time.Duration
		out    bool
	}{
		{0, time.Millisecond, true},
		{1, time.Millisecond, false}, // up more than 0s: at least the next moment
		{1, 100 * time.Millisecond, true},
		{5, 4*time.Second - time.Millisecond, false},
		{5, 4*time.Second + 100*time.Millisecond, true},
	} {
		u := &upState{addr: "m"}
		before := time.Now()
		if err := u.read(ctx, fakeInfo{runID: "a", uptime: c.uptime}, true); err != nil {
			t.Fatal(err)
		}
		// Judged a moment after the reading, as an acquire would be.
		out := u.outOfService(time.Now().Add(time.Millisecond), c.maxTTL)
		if got := out != nil; got != c.out {
			t.Errorf("uptime %ds, max TTL %v: out = %v (%v), want %v", c.uptime, c.maxTTL, got, out, c.out)
		}
		if out != nil {
			if limit := c.maxTTL - time.Duration(c.uptime-1)*time.Second; out.StaysOut > limit+time.Since(before) || out.StaysOut <= 0 {
				t.Errorf("uptime %ds, max TTL %v: stays out %v, want at most %v", c.uptime, c.maxTTL, out.StaysOut, limit)
			}
		}
	}
}

// TestUptimeNeverGoesBack: a reading of an older process that arrives
// after one of the new process (two connections, their OnConnect
// finishing out of order) does not make the master look up for longer;
// and a reading that fails at connect makes it count for nothing until
// a later reading succeeds.
func TestUptimeNeverGoesBack(t *testing.T) {
	ctx := t.Context()
	u := &upState{addr: "m"}
	_ = u.read(ctx, fakeInfo{runID: "new", uptime: 0}, true)
	_ = u.read(ctx, fakeInfo{runID: "old", uptime: 3600}, true)
	if out := u.outOfService(time.Now(), time.Second); out == nil {
		t.Fatal("a late reading of the old process made the new one count")
	}
	_ = u.read(ctx, fakeInfo{err: errors.New("NOPERM")}, true)
	out := u.outOfService(time.Now().Add(time.Hour), time.Second)
	if out == nil || out.Err == nil {
		t.Fatalf("after a failed reading at connect: %v, want unknown", out)
	}
	if u.known() {
		t.Fatal("known after a failed reading")
	}
	_ = u.read(ctx, fakeInfo{runID: "new", uptime: 10}, false)
	if !u.known() {
		t.Fatal("unknown after a later reading succeeded")
	}
	if out := u.outOfService(time.Now().Add(2*time.Second), time.Second); out != nil {
		t.Fatalf("up since its first reading (the latest start of all), 2s later: %v", out)
	}
}
