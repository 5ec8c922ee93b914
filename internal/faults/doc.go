// Package faults is the fault-injection suite of locksmith: tests that run
// locks against real redis-server processes while the network, the server
// and the lock holders misbehave, and check the recorded history.
//
// It is internal: its exported code is the tests' own equipment, not part
// of locksmith's API:
//
//   - Proxy, a TCP proxy on the loopback interface that can delay,
//     blackhole and reset the connections between clients and Redis;
//   - History, a record of operations on one monotonic clock shared by the
//     test process and the helper processes it starts, and its checker;
//   - Store, a fenced resource that rejects writes carrying a fencing
//     token lower than the highest it has accepted.
//
// The suite runs on Linux only: it stops and kills helper processes with
// signals and shares CLOCK_MONOTONIC between processes. Run it with
//
//	go test -race ./internal/faults
//
// and the longer randomised soak with
//
//	go test -v ./internal/faults -run Soak -soak=2m [-seed=N] [-histories=DIR]
//
// See docs/guarantees.md for what each test demonstrates.
package faults
