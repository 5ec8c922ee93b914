package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// On a 2-vCPU machine the loopback round trip is bimodal: a few
// microseconds when the client and redis-server happen to share a vCPU,
// tens when they do not, and it flips mid-run. Pinning them to different
// CPUs makes runs comparable. The benchmark pins itself by re-executing
// under taskset (so every thread, and GOMAXPROCS, follow from the start)
// and starts redis-server under taskset too.

// pinnedEnv is set in the environment of the re-executed, pinned process;
// its value is the CPU the server goes on.
const pinnedEnv = "LOCKSMITH_BENCH_SERVER_CPU"

// pinning says where the benchmark and the server run.
type pinning struct {
	serverCPU int    // -1: the server is not pinned
	note      string // what was done, for the output
}

// pinSelf re-executes the benchmark under `taskset -c <first allowed
// CPU>` and does not return when that works. It returns how the run is
// pinned: in the re-executed process, to the first CPU with the server on
// the second; otherwise not at all, with the reason.
func pinSelf(want bool) pinning {
	if v := os.Getenv(pinnedEnv); v != "" {
		cpu, err := strconv.Atoi(v)
		if err != nil {
			return pinning{serverCPU: -1, note: fmt.Sprintf("not pinned: bad %s=%q", pinnedEnv, v)}
		}
		return pinning{serverCPU: cpu, note: fmt.Sprintf(
			"benchmark pinned to CPU %s (GOMAXPROCS=%d) with taskset", allowedCPUs(), runtime.GOMAXPROCS(0))}
	}
	if !want {
		return pinning{serverCPU: -1, note: "not pinned (-pin=false)"}
	}
	cpus := parseCPUList(allowedCPUs())
	if len(cpus) < 2 {
		return pinning{serverCPU: -1, note: fmt.Sprintf("not pinned: only one CPU (%v) is available", cpus)}
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return pinning{serverCPU: -1, note: "not pinned: taskset not found (apt-get install util-linux)"}
	}
	self, err := os.Executable()
	if err != nil {
		return pinning{serverCPU: -1, note: "not pinned: " + err.Error()}
	}
	args := append([]string{"taskset", "-c", strconv.Itoa(cpus[0]), self}, os.Args[1:]...)
	env := append(os.Environ(), pinnedEnv+"="+strconv.Itoa(cpus[1]))
	err = syscall.Exec(taskset, args, env)
	return pinning{serverCPU: -1, note: "not pinned: re-executing under taskset failed: " + err.Error()}
}

// allowedCPUs returns the CPUs this process may run on, as Linux lists
// them ("0-1"), or "?".
func allowedCPUs() string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// parseCPUList parses a Linux CPU list such as "0-3,6".
func parseCPUList(s string) []int {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// cpuInfo returns the CPU model and the number of CPUs of the machine
// (not of this process, which may be pinned to one).
func cpuInfo() (model string, n int) {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown", runtime.NumCPU()
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "processor":
			n++
		case "model name":
			if model == "" {
				model = strings.TrimSpace(val)
			}
		}
	}
	if model == "" {
		model = "unknown"
	}
	return model, n
}

// kernel returns the running kernel's release, or "unknown".
func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(data))
}
