// Command bench measures locksmith against the other Go Redis locks and a
// raw go-redis baseline, side by side in one run against one Redis, and
// locksmith on a quorum of independent servers and on a Redis Cluster.
//
// It starts a private redis-server (or uses -redis URL) and the private
// servers of the quorum and the cluster, pins itself and the servers to
// different CPUs, and runs four lock scenarios for every library one after
// the other, then four semaphore scenarios for locksmith's semaphore and a
// raw sorted-set baseline, then two read-mostly scenarios for locksmith's
// read-write lock, its plain lock and a raw polling read-write lock, then
// two scenarios of sets of locks taken at once (ObtainAll, two locks in
// sorted order, a one-script set), printing one table per scenario. See README.md here and
// docs/performance.md at the root.
//
// Usage, from this directory:
//
//	go run . [-quick] [-d 3s] [-redis redis://host:port/0] [-libs locksmith,raw] [-scenarios serial,contended16,sem16n4,rw16]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	measure, warmup time.Duration
	hold, rawRetry  time.Duration
	redisURL        string
	redisServer     string
	pin             bool
	libs, scenarios string
	pings, rounds   int
	noDeadline      bool
}

func main() { os.Exit(run()) }

func run() int {
	var o options
	quick := flag.Bool("quick", false, "short run, about 30s in all: -d 600ms -warmup 200ms")
	flag.DurationVar(&o.measure, "d", 3*time.Second, "measured time per library per scenario")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each measurement")
	flag.DurationVar(&o.hold, "hold", 2300*time.Microsecond, "how long a contended worker holds the lock or permit")
	flag.DurationVar(&o.rawRetry, "raw-retry", time.Millisecond, "retry interval of the raw baseline (0: spin)")
	flag.StringVar(&o.redisURL, "redis", "", "use this Redis (redis://host:port/db) instead of a private server; ALL ITS DATA IS DELETED (FLUSHALL)")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary for the private server")
	flag.BoolVar(&o.pin, "pin", true, "pin the benchmark and redis-server to different CPUs with taskset")
	flag.StringVar(&o.libs, "libs", "", "comma-separated substrings: run only the libraries whose names contain one (the raw baseline always runs)")
	flag.StringVar(&o.scenarios, "scenarios", "", "comma-separated scenario ids to run: serial, parallel, contended16, contended256, sem16n1, sem16n4, sem256n1, sem256n4, rw16, rw256, set2, set16")
	flag.IntVar(&o.pings, "pings", 2000, "PINGs for the loopback RTT")
	flag.BoolVar(&o.noDeadline, "no-deadline", false, "the uncontended scenarios (serial, parallel) call without a deadline (context.Background()); by default every call's deadline is the end of its measured window")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.IntVar(&o.rounds, "rounds", 1, "split each measurement into this many rounds, the libraries taking turns, so that a noisy neighbour hurts all of them alike")
	flag.Parse()
	if *quick {
		o.measure, o.warmup = 600*time.Millisecond, 200*time.Millisecond
	}
	if flag.NArg() > 0 || o.measure <= 0 || o.warmup < 0 || o.hold <= 0 || o.pings < 1 || o.rounds < 1 {
		flag.Usage()
		return 2
	}

	// Pin before anything else: this may re-execute the program.
	pin := pinSelf(o.pin)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}

	scs, err := selectScenarios(o.scenarios)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// The lock libraries run the lock scenarios, and only they need the
	// quorum and the cluster. Each semaphore scenario has rows of its own,
	// at its number of permits, and the read-write scenarios theirs, all
	// on the main server.
	var libs, rwRows, setRows []lib
	if slices.ContainsFunc(scs, scenario.lock) {
		libs = selectLibs(libraries(o.rawRetry), o.libs)
	}
	if slices.ContainsFunc(scs, scenario.rw) {
		rwRows = selectLibs(rwLibraries(o.rawRetry), o.libs)
	}
	setLibs := func(contended bool) []lib { return selectLibs(setLibraries(o.rawRetry, contended), o.libs) }
	if slices.ContainsFunc(scs, scenario.sets) {
		setRows = setLibs(true) // for the header: every row, each describing both of its forms
	}
	semLibs := func(permits int) []lib { return selectLibs(semaphoreLibraries(o.rawRetry, permits), o.libs) }
	var semRows []lib // for the header; their settings do not depend on the permits
	if i := slices.IndexFunc(scs, scenario.semaphore); i >= 0 {
		semRows = semLibs(scs[i].permits)
	}

	// Every server this program starts is in deps, and stopped on return.
	deps := deployments{}
	defer deps.stop()
	target, where := o.redisURL, ""
	var servers []*server
	if target == "" {
		srv, err := startServer(ctx, o.redisServer, pin.serverCPU, false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		servers = []*server{srv}
		if pin.serverCPU >= 0 {
			pin.note += fmt.Sprintf(", redis-server to CPU %d", pin.serverCPU)
		}
		target = srv.url()
		where = fmt.Sprintf("private, %s, --save \"\" --appendonly no", srv.addr)
	} else {
		where = "external, " + redactURL(target)
		pin.note += "; the external redis-server is not pinned by this program, so it may share the benchmark's CPU"
	}
	single, err := newDeployment(where, []string{target}, servers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	deps[mainServer] = single
	admin := single.admins[0]

	libs, skipped, err := deps.startFor(ctx, libs, o.redisServer, pin.serverCPU)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	for _, note := range skipped {
		fmt.Fprintln(os.Stderr, "bench:", note)
	}

	rtt, err := loopbackRTT(ctx, admin, o.pings)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: PING:", err)
		return 2
	}
	printHeader(ctx, &o, pin, deps, skipped, rtt, slices.Concat(libs, semRows, rwRows, setRows))

	b := &bench{deployments: deps, warmup: o.warmup, measure: o.measure / time.Duration(o.rounds), hold: o.hold, noDeadline: o.noDeadline}
	failed := false
	for _, sc := range scs {
		rows := libs
		switch {
		case sc.sets():
			rows = setLibs(sc.contended)
		case sc.semaphore():
			rows = semLibs(sc.permits)
		case sc.rw():
			rows = rwRows
		case sc.contended:
			rows = slices.DeleteFunc(slices.Clone(libs), uncontendedOnly)
		}
		results := make([]*result, len(rows))
		for round := range o.rounds {
			var baseRate float64
			for i, l := range rows {
				fmt.Fprintf(os.Stderr, "running %s, round %d/%d: %s\n", sc.id, round+1, o.rounds, l.name())
				r := b.run(ctx, sc, l)
				if isBaseline(l) && i == 0 && r.err == nil {
					baseRate = r.rate()
				}
				ratio := 0.0
				if baseRate > 0 {
					ratio = r.rate() / baseRate
				}
				results[i] = results[i].add(r)
				results[i].roundRatios = append(results[i].roundRatios, ratio)
				if r.err != nil || r.violations > 0 {
					failed = true
				}
				if ctx.Err() != nil {
					fmt.Fprintln(os.Stderr, "bench: interrupted")
					return 1
				}
			}
		}
		report(sc, results, rtt).print(os.Stdout)
		if sc.sets() {
			ratioTable(fmt.Sprintf("%s: ratios of %s", sc.id, rateName(sc)), results).print(os.Stdout)
		}
		if o.rounds > 1 {
			pairedTable(fmt.Sprintf("%s: rates round by round (row / column)", sc.id), results).print(os.Stdout)
		}
		for _, r := range results {
			switch {
			case r.violations == 0:
			case sc.rw():
				fmt.Printf("\n*** READ-WRITE EXCLUSION VIOLATED: %s let a writer in beside another holder %d times ***\n", r.lib.name(), r.violations)
			case sc.semaphore():
				fmt.Printf("\n*** SEMAPHORE LIMIT VIOLATED: %s let more than %d holders into the critical section %d times ***\n", r.lib.name(), sc.permits, r.violations)
			default:
				fmt.Printf("\n*** MUTUAL EXCLUSION VIOLATED: %s had %d overlapping critical sections ***\n", r.lib.name(), r.violations)
			}
		}
	}
	if failed {
		fmt.Fprintln(os.Stderr, "bench: FAILED: a run failed, or mutual exclusion, a semaphore's limit or a read-write lock's exclusion was violated")
		return 1
	}
	return 0
}

func printHeader(ctx context.Context, o *options, pin pinning, deps deployments, skipped []string, rtt time.Duration, libs []lib) {
	model, ncpu := cpuInfo()
	single := deps[mainServer]
	fmt.Println("## Lock benchmark")
	fmt.Println()
	fmt.Printf("- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Printf("- machine: %s, %d CPUs, Linux %s\n", model, ncpu, kernel())
	fmt.Printf("- go: %s %s/%s, GOMAXPROCS=%d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Printf("- redis-server: %s (%s)\n", serverVersion(ctx, single.admins[0]), single.desc)
	for _, t := range []topology{quorumServers, clusterServers} {
		if d := deps[t]; d != nil {
			fmt.Printf("- %v: %s\n", t, d.desc)
		}
	}
	fmt.Printf("- pinning: %s\n", pin.note)
	fmt.Printf("- loopback RTT: %s (median of %d PINGs through go-redis)\n", fmtDur(rtt), o.pings)
	fmt.Printf("- each library runs %v measured (in %d round(s), each after %v of warm-up), one after the other, FLUSHALL in between; contended holders sleep %v in the lock or permit\n",
		o.measure, o.rounds, o.warmup, o.hold)
	if o.noDeadline {
		fmt.Println("- calls: the uncontended scenarios' (serial, parallel) without a deadline (context.Background()), the others' with the end of the measured window as their deadline")
	} else {
		fmt.Printf("- calls: every call with the end of its measured window as its deadline (a release's %v later)\n", stopGrace)
	}
	fmt.Printf("- modules: %s\n", moduleVersions())
	fmt.Println("- libraries and settings:")
	for _, l := range libs {
		fmt.Printf("  - %s: %s\n", l.name(), l.settings())
	}
	for _, note := range skipped {
		fmt.Printf("  - %s\n", note)
	}
	fmt.Println("- a figure in parentheses is the ratio to the raw baseline's (on the main server; for the semaphore rows, the raw sorted-set semaphore's; for the read-write rows, the raw sorted-set rwlock's; for the set rows, the one-script SET NX set (polling)'s); requests are INFO total_reads_processed, commands INFO commandstats calls (commands inside scripts included), summed over the servers of the quorum and cluster rows; see docs/performance.md")
}

// moduleVersions lists the versions of the measured modules in this build.
func moduleVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := []string{
		"github.com/locksmith-go/locksmith",
		"github.com/redis/go-redis/v9",
		"github.com/bsm/redislock",
		"github.com/go-redsync/redsync/v4",
		"github.com/redis/rueidis",
	}
	var parts []string
	for _, d := range bi.Deps {
		if !slices.Contains(want, d.Path) {
			continue
		}
		v := d.Version
		if d.Replace != nil {
			v = "=> " + d.Replace.Path
		}
		parts = append(parts, d.Path+" "+v)
	}
	return strings.Join(parts, ", ")
}

// selectLibs keeps the baseline and the libraries matching filter.
func selectLibs(all []lib, filter string) []lib {
	if filter == "" {
		return all
	}
	var out []lib
	for i, l := range all {
		name := strings.ToLower(l.name())
		if i == 0 || slices.ContainsFunc(strings.Split(strings.ToLower(filter), ","), func(f string) bool {
			return f != "" && strings.Contains(name, strings.TrimSpace(f))
		}) {
			out = append(out, l)
		}
	}
	return out
}

func selectScenarios(filter string) ([]scenario, error) {
	if filter == "" {
		return scenarios, nil
	}
	var out []scenario
	for id := range strings.SplitSeq(filter, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.id == strings.TrimSpace(id) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q", id)
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

// redactURL drops any password from a Redis URL before printing it.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
