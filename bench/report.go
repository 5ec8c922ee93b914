package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A table is printed as a Markdown table with padded columns, readable in
// a terminal and ready to paste.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

func (t *table) print(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, cell := range row {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, cell := range cells {
			pad := strings.Repeat(" ", widths[i]-len([]rune(cell)))
			if i == 0 {
				b.WriteString(" " + cell + pad + " |")
			} else {
				b.WriteString(" " + pad + cell + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	fmt.Fprintf(w, "\n### %s\n\n", t.title)
	line(t.header)
	sep := make([]string, len(widths))
	for i, n := range widths {
		if i == 0 {
			sep[i] = strings.Repeat("-", n+2)
		} else {
			sep[i] = strings.Repeat("-", n+1) + ":" // right-aligned
		}
	}
	fmt.Fprintln(w, "|"+strings.Join(sep, "|")+"|")
	for _, row := range t.rows {
		line(row)
	}
	for _, n := range t.notes {
		fmt.Fprintln(w, "- "+n)
	}
}

// report turns one scenario's results into a table. The first result is
// the baseline when it is a raw library's.
func report(sc scenario, results []*result, rtt time.Duration) *table {
	var base *result
	if len(results) > 0 {
		if isBaseline(results[0].lib) && results[0].err == nil && results[0].ops > 0 {
			base = results[0]
		}
	}
	t := &table{title: sc.title}
	switch {
	case sc.sets():
		t.header = setColumns(sc)
	case sc.rw():
		t.header = rwColumns
	case sc.semaphore():
		t.header = append([]string{"library", "permits/s", "by round vs raw", "held of " + strconv.Itoa(sc.permits)}, contendedColumns...)
	case sc.contended:
		t.header = append([]string{"library", "handoffs/s", "to another/s"}, contendedColumns...)
	default:
		t.header = []string{"library", "cycles/s", "by round vs raw", "p50", "p99", "max", "allocs/cycle", "requests/cycle", "client CPU/cycle", "server CPU/cycle", "command time/cycle", "gave up", "errors"}
	}
	for _, r := range results {
		if r.err != nil {
			t.rows = append(t.rows, append([]string{r.lib.name(), "FAILED"}, make([]string, len(t.header)-2)...))
			t.notes = append(t.notes, fmt.Sprintf("%s: %v", r.lib.name(), r.err))
			continue
		}
		if r.firstErr != "" {
			t.notes = append(t.notes, fmt.Sprintf("%s: first error: %s", r.lib.name(), r.firstErr))
		}
		if r.lat.n > 0 && float64(r.nonPositive) >= 0.005*float64(r.lat.n) {
			t.notes = append(t.notes, fmt.Sprintf("%s: %.0f%% of gaps were <= 0 (counted as 0): the next Obtain returned before the Release call did",
				r.lib.name(), 100*float64(r.nonPositive)/float64(r.lat.n)))
		}
		if r.unmatched > 0 {
			t.notes = append(t.notes, fmt.Sprintf("%s: %d gaps not measured (the previous Release had not returned after the hold)", r.lib.name(), r.unmatched))
		}
		if sc.rw() && r.longestGap >= stallNote {
			rounds := time.Duration(max(len(r.roundRatios), 1))
			t.notes = append(t.notes, fmt.Sprintf("%s: nobody entered for %s at a stretch (measured in rounds of %s): its waiters waited while nobody held",
				r.lib.name(), fmtDur(r.longestGap), fmtDur(r.elapsed/rounds)))
		}
		switch {
		case sc.sets():
			t.rows = append(t.rows, setRow(sc, r, base))
		case sc.rw():
			t.rows = append(t.rows, rwRow(sc, r, base))
		case sc.contended:
			t.rows = append(t.rows, contendedRow(sc, r, base, rtt))
		default:
			t.rows = append(t.rows, cycleRow(r, base))
		}
	}
	if base == nil {
		t.notes = append(t.notes, "no raw baseline in this run: ratios omitted")
	}
	if sc.sets() {
		t.notes = append(t.notes, "ratios in parentheses are to the first row, the one-script SET NX set polling at -raw-retry (a reimplementation, for this benchmark, of the approach of redislock's unreleased ObtainMulti, not its code); redislock v0.9.4, its newest release, has no call for several keys")
	}
	if sc.semaphore() {
		t.notes = append(t.notes, "redislock, redsync and rueidislock have no semaphores: they do not run this scenario")
	}
	if sc.rw() {
		t.notes = append(t.notes, fmt.Sprintf("each acquisition a read hold with probability %.2f, else a write hold; wait: from the obtain call to its return; redislock, redsync and rueidislock have no read-write locks: they do not run this scenario", sc.reads))
	}
	return t
}

// contendedColumns are the columns of a contended table after the rates.
var contendedColumns = []string{"gap p50", "gap p99", "gap max", "p50/p99 in RTTs",
	"requests/acq", "commands/acq", "acq/worker min/mean/max", "share per instance", "releaser again", "hold / release mean", "gave up", "errors", "violations"}

func cycleRow(r, base *result) []string {
	row := []string{
		r.lib.name(),
		withRatio(fmtInt(r.rate()), r.rate(), baseOf(base, (*result).rate)),
		byRound(r.roundRatios),
		withRatio(fmtDur(r.lat.quantile(0.5)), secs(r.lat.quantile(0.5)), baseOf(base, p50)),
		withRatio(fmtDur(r.lat.quantile(0.99)), secs(r.lat.quantile(0.99)), baseOf(base, p99)),
		fmtDur(maxOf(r.lat)),
		withRatio(fmtFloat(r.perOp(float64(r.mallocs))), r.perOp(float64(r.mallocs)), baseOf(base, func(b *result) float64 { return b.perOp(float64(b.mallocs)) })),
		withRatio(fmtFloat(r.perOp(float64(r.server.reads))), r.perOp(float64(r.server.reads)), baseOf(base, reads)),
	}
	row = append(row, cpuColumns(r, base)...)
	return append(row, strconv.FormatInt(r.gaveUp, 10), strconv.FormatInt(r.errs, 10))
}

// contendedRow is a row of a contended table: for a semaphore scenario,
// the rate is of permits, then come the rate by round and how many
// workers were inside the critical section on average.
func contendedRow(sc scenario, r, base *result, rtt time.Duration) []string {
	lo, mean, hi := spread(r.perWorker)
	same := "-"
	if r.sameOf > 0 {
		same = fmt.Sprintf("%.0f%%", 100*float64(r.same)/float64(r.sameOf))
	}
	inRTT := "-"
	if rtt > 0 && r.lat.n > 0 {
		inRTT = fmt.Sprintf("%.1f / %.1f", float64(r.lat.quantile(0.5))/float64(rtt), float64(r.lat.quantile(0.99))/float64(rtt))
	}
	row := []string{r.lib.name(), withRatio(fmtInt(r.rate()), r.rate(), baseOf(base, (*result).rate))}
	if sc.semaphore() {
		row = append(row, byRound(r.roundRatios), fmtFloat(r.meanHeld()))
	} else {
		row = append(row, withRatio(fmtInt(r.toAnotherRate()), r.toAnotherRate(), baseOf(base, (*result).toAnotherRate)))
	}
	return append(row,
		withRatio(fmtDur(r.lat.quantile(0.5)), secs(r.lat.quantile(0.5)), baseOf(base, p50)),
		withRatio(fmtDur(r.lat.quantile(0.99)), secs(r.lat.quantile(0.99)), baseOf(base, p99)),
		fmtDur(maxOf(r.lat)),
		inRTT,
		withRatio(fmtFloat(r.perOp(float64(r.server.reads))), r.perOp(float64(r.server.reads)), baseOf(base, reads)),
		withRatio(fmtFloat(r.perOp(float64(r.server.calls))), r.perOp(float64(r.server.calls)), baseOf(base, calls)),
		fmt.Sprintf("%d / %.0f / %d", lo, mean, hi),
		instanceShares(r.perWorker, sc.lockers),
		same,
		fmt.Sprintf("%s / %s", fmtDur(r.perAcq(r.holdSum)), fmtDur(r.perAcq(r.releaseSum))),
		strconv.FormatInt(r.gaveUp, 10),
		strconv.FormatInt(r.errs, 10),
		strconv.FormatInt(r.violations, 10),
	)
}

// stallNote is the longest time without an entry into a read-write lock
// that a table passes over without a note.
const stallNote = time.Second

// rwColumns are the columns of a read-write table.
var rwColumns = []string{"library", "acq/s", "by round vs raw", "reads/s", "writes/s", "readers inside mean / peak", "writer inside", "longest without entry",
	"read wait p50", "read wait p99", "write wait p50", "write wait p99", "write wait max",
	"requests/acq", "commands/acq", "acq/worker min/mean/max", "share per instance", "gave up", "errors", "violations"}

// rwRow is a row of a read-write table: acquisitions of either kind, then
// reads and writes apart, how many readers were inside on average and at
// most, the share of the time a writer held, the longest time in which
// nobody entered, and the obtain calls' waits.
func rwRow(sc scenario, r, base *result) []string {
	lo, mean, hi := spread(r.perWorker)
	wl := r.writeLat
	if wl == nil {
		wl = new(hist)
	}
	writerInside := "-"
	if r.elapsed > 0 {
		writerInside = fmt.Sprintf("%.0f%%", 100*r.writeHoldSum.Seconds()/r.elapsed.Seconds())
	}
	return []string{
		r.lib.name(),
		withRatio(fmtInt(r.rate()), r.rate(), baseOf(base, (*result).rate)),
		byRound(r.roundRatios),
		withRatio(fmtInt(r.readRate()), r.readRate(), baseOf(base, (*result).readRate)),
		withRatio(fmtInt(r.writeRate()), r.writeRate(), baseOf(base, (*result).writeRate)),
		fmt.Sprintf("%s / %d", fmtFloat(r.meanReaders()), r.peakReaders),
		writerInside,
		fmtDur(r.longestGap),
		withRatio(fmtDur(r.lat.quantile(0.5)), secs(r.lat.quantile(0.5)), baseOf(base, p50)),
		withRatio(fmtDur(r.lat.quantile(0.99)), secs(r.lat.quantile(0.99)), baseOf(base, p99)),
		withRatio(fmtDur(wl.quantile(0.5)), secs(wl.quantile(0.5)), baseOf(base, writeP50)),
		withRatio(fmtDur(wl.quantile(0.99)), secs(wl.quantile(0.99)), baseOf(base, writeP99)),
		fmtDur(maxOf(wl)),
		withRatio(fmtFloat(r.perOp(float64(r.server.reads))), r.perOp(float64(r.server.reads)), baseOf(base, reads)),
		withRatio(fmtFloat(r.perOp(float64(r.server.calls))), r.perOp(float64(r.server.calls)), baseOf(base, calls)),
		fmt.Sprintf("%d / %.0f / %d", lo, mean, hi),
		instanceShares(r.perWorker, sc.lockers),
		strconv.FormatInt(r.gaveUp, 10),
		strconv.FormatInt(r.errs, 10),
		strconv.FormatInt(r.violations, 10),
	}
}

// readRate and writeRate are the read and write holds taken per second.
func (r *result) readRate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops-r.writes) / r.elapsed.Seconds()
}

func (r *result) writeRate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.writes) / r.elapsed.Seconds()
}

// meanReaders is how many readers were inside on average over the window
// (their time held over the window's), or -1.
func (r *result) meanReaders() float64 {
	if r.elapsed <= 0 {
		return -1
	}
	return (r.holdSum - r.writeHoldSum).Seconds() / r.elapsed.Seconds()
}

func (r *result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// meanHeld is how many workers were inside the critical section on
// average over the window (their time held over the window's), or -1.
func (r *result) meanHeld() float64 {
	if r.elapsed <= 0 {
		return -1
	}
	return r.holdSum.Seconds() / r.elapsed.Seconds()
}

// toAnotherRate is the rate of acquisitions by another goroutine than the
// one that released just before.
func (r *result) toAnotherRate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.sameOf-r.same) / r.elapsed.Seconds()
}

// perOp divides a window total by the operations in the window.
func (r *result) perOp(total float64) float64 {
	if r.ops == 0 {
		return -1
	}
	return total / float64(r.ops)
}

// perAcq divides a window total time by the acquisitions, or -1.
func (r *result) perAcq(total time.Duration) time.Duration {
	if r.ops == 0 {
		return -1
	}
	return total / time.Duration(r.ops)
}

func writeP50(r *result) float64 {
	if r.writeLat == nil {
		return -1
	}
	return secs(r.writeLat.quantile(0.5))
}

func writeP99(r *result) float64 {
	if r.writeLat == nil {
		return -1
	}
	return secs(r.writeLat.quantile(0.99))
}

func p50(r *result) float64   { return secs(r.lat.quantile(0.5)) }
func p99(r *result) float64   { return secs(r.lat.quantile(0.99)) }
func reads(r *result) float64 { return r.perOp(float64(r.server.reads)) }
func calls(r *result) float64 { return r.perOp(float64(r.server.calls)) }

// serverCPU is the servers' CPU time per operation in µs; commandTime is
// the part of it inside commands (INFO commandstats).
func serverCPU(r *result) float64   { return r.perOp(float64(r.server.cpu)) }
func commandTime(r *result) float64 { return r.perOp(float64(r.server.usec)) }

// cpuColumns are an uncontended row's CPU columns, each with its ratio to
// base: the client's, the servers', and the servers' inside commands.
func cpuColumns(r, base *result) []string {
	col := func(f func(*result) float64) string { return withRatio(fmtMicros(f(r)), f(r), baseOf(base, f)) }
	return []string{col(clientCPU), col(serverCPU), col(commandTime)}
}

// clientCPU is the benchmark process's CPU time per operation in µs.
func clientCPU(r *result) float64 { return r.perOp(float64(r.clientCPU.Microseconds())) }

// fmtMicros formats a figure in µs.
func fmtMicros(us float64) string { return fmtFloat(us) + "µs" }

func secs(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Seconds()
}

func maxOf(h *hist) time.Duration {
	if h.n == 0 {
		return -1
	}
	return h.max
}

// baseOf returns f(base), or -1 when there is no baseline.
func baseOf(base *result, f func(*result) float64) float64 {
	if base == nil {
		return -1
	}
	return f(base)
}

// withRatio appends "(v/baseline x)" to a cell when both are known.
func withRatio(cell string, v, baseline float64) string {
	if v < 0 || baseline <= 0 {
		return cell
	}
	ratio := v / baseline
	switch {
	case ratio >= 100:
		return fmt.Sprintf("%s (%.0fx)", cell, ratio)
	case ratio >= 10:
		return fmt.Sprintf("%s (%.1fx)", cell, ratio)
	default:
		return fmt.Sprintf("%s (%.2fx)", cell, ratio)
	}
}

// instanceShares returns each instance's share of the acquisitions;
// worker i uses instance i % instances.
func instanceShares(perWorker []int64, instances int) string {
	sums := make([]int64, instances)
	var total int64
	for i, n := range perWorker {
		sums[i%instances] += n
		total += n
	}
	if total == 0 {
		return "-"
	}
	parts := make([]string, instances)
	for i, n := range sums {
		parts[i] = fmt.Sprintf("%.0f%%", 100*float64(n)/float64(total))
	}
	return strings.Join(parts, " / ")
}

func spread(xs []int64) (lo int64, mean float64, hi int64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	var sum int64
	for _, x := range xs {
		sum += x
	}
	return slices.Min(xs), float64(sum) / float64(len(xs)), slices.Max(xs)
}

func fmtDur(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case d < 0:
		return "-"
	case d == 0:
		return "0"
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", us)
	case d < 999500*time.Nanosecond: // would round to "1000µs"
		return fmt.Sprintf("%.0fµs", us)
	case d < 9995*time.Microsecond:
		return fmt.Sprintf("%.2fms", us/1000)
	case d < 999950*time.Microsecond:
		return fmt.Sprintf("%.1fms", us/1000)
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtFloat(v float64) string {
	switch {
	case v < 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtInt formats v rounded, with thousands separators.
func fmtInt(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// byRound summarises the per-round rate ratios to the raw baseline as
// "median (min-max)": on a noisy machine the rounds of one run, each
// measured right beside the baseline's, say more than the totals do.
func byRound(ratios []float64) string {
	var rs []float64
	for _, r := range ratios {
		if r > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return "-"
	}
	med := median(rs)
	if len(rs) == 1 {
		return fmt.Sprintf("%.2fx", med)
	}
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", med, rs[0], rs[len(rs)-1])
}

// fairness returns the fewest acquisitions of any worker over the mean,
// or -1 when there are none: 1 when every worker took as many, 0 when
// one starved.
func fairness(perWorker []int64) float64 {
	lo, mean, _ := spread(perWorker)
	if mean <= 0 {
		return -1
	}
	return float64(lo) / mean
}

// ratioTable returns a table of every result's rate over every other's,
// the row's over the column's, titled title; a failed or empty result
// has no ratios.
func ratioTable(title string, results []*result) *table {
	return matrixTable(title, results, func(r, c *result) string {
		if r.err == nil && c.err == nil && r.rate() > 0 && c.rate() > 0 {
			return fmt.Sprintf("%.2fx", r.rate()/c.rate())
		}
		return "-"
	})
}

// matrixTable returns a table titled title with a row and a column for
// each result, each cell cell(row's result, column's).
func matrixTable(title string, results []*result, cell func(r, c *result) string) *table {
	t := &table{title: title, header: []string{"row / column"}}
	for _, r := range results {
		t.header = append(t.header, r.lib.name())
	}
	for _, r := range results {
		row := []string{r.lib.name()}
		for _, c := range results {
			row = append(row, cell(r, c))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// pairedTable returns a table of every result against every other,
// round by round, titled title: each cell is the median over the rounds
// of the row's rate over the column's in the same round, and in how many
// rounds the row's rate was the higher. The rates of one round were
// measured within seconds of each other, so the machine's drift between
// rounds, which moves every row's total, largely cancels: on a noisy
// machine this is the fairest way to ask whether one row is ahead of
// another. A cell is "-" for a failed result or rounds without a baseline.
func pairedTable(title string, results []*result) *table {
	t := matrixTable(title, results, pairedCell)
	t.notes = append(t.notes, "each cell: the median over the rounds of the row's rate over the column's in the same round, then the rounds in which the row was faster, of the rounds both ran")
	return t
}

// pairedCell compares r with c round by round: see pairedTable.
func pairedCell(r, c *result) string {
	if r.err != nil || c.err != nil || len(r.roundRatios) != len(c.roundRatios) {
		return "-"
	}
	var ratios []float64
	won := 0
	for i, x := range r.roundRatios {
		y := c.roundRatios[i]
		if x <= 0 || y <= 0 {
			continue
		}
		ratios = append(ratios, x/y)
		if x > y {
			won++
		}
	}
	if len(ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx (%d/%d)", median(ratios), won, len(ratios))
}

// median returns the median of vs, which it sorts; vs is not empty.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[n/2]
}

// setColumns are the columns of a set table: an uncontended one's are
// those of a cycle, a contended one's those of the workers' waits and
// shares.
func setColumns(sc scenario) []string {
	if !sc.contended {
		return []string{"library", "cycles/s", "by round vs one-script", "p50", "p99", "max", "allocs/cycle", "requests/cycle", "commands/cycle", "client CPU/cycle", "server CPU/cycle", "command time/cycle", "gave up", "errors", "violations"}
	}
	return []string{"library", "sets/s", "by round vs one-script", "held of " + strconv.Itoa(sc.pool/sc.set), "wait p50", "wait p99", "wait max",
		"requests/acq", "commands/acq", "allocs/acq", "fairness min/mean", "acq/worker min/mean/max", "hold / release mean", "gave up", "errors", "violations"}
}

// setRow is a row of a set table: uncontended, the rate and latency of
// whole cycles; contended, the sets taken per second, how many were held
// at once on average (at most the ring's keys over the set's size), how
// long the obtain calls took, and how evenly the workers shared.
func setRow(sc scenario, r, base *result) []string {
	perOp := func(f func(*result) float64) string { return withRatio(fmtFloat(f(r)), f(r), baseOf(base, f)) }
	allocs := func(r *result) float64 { return r.perOp(float64(r.mallocs)) }
	row := []string{
		r.lib.name(),
		withRatio(fmtInt(r.rate()), r.rate(), baseOf(base, (*result).rate)),
		byRound(r.roundRatios),
	}
	if !sc.contended {
		row = append(row,
			withRatio(fmtDur(r.lat.quantile(0.5)), secs(r.lat.quantile(0.5)), baseOf(base, p50)),
			withRatio(fmtDur(r.lat.quantile(0.99)), secs(r.lat.quantile(0.99)), baseOf(base, p99)),
			fmtDur(maxOf(r.lat)),
			perOp(allocs), perOp(reads), perOp(calls),
		)
		row = append(row, cpuColumns(r, base)...)
		return append(row,
			strconv.FormatInt(r.gaveUp, 10),
			strconv.FormatInt(r.errs, 10),
			strconv.FormatInt(r.violations, 10),
		)
	}
	lo, mean, hi := spread(r.perWorker)
	fair := "-"
	if f := fairness(r.perWorker); f >= 0 {
		fair = fmt.Sprintf("%.2f", f)
	}
	return append(row,
		fmtFloat(r.meanHeld()),
		withRatio(fmtDur(r.lat.quantile(0.5)), secs(r.lat.quantile(0.5)), baseOf(base, p50)),
		withRatio(fmtDur(r.lat.quantile(0.99)), secs(r.lat.quantile(0.99)), baseOf(base, p99)),
		fmtDur(maxOf(r.lat)),
		perOp(reads), perOp(calls), perOp(allocs),
		fair,
		fmt.Sprintf("%d / %.0f / %d", lo, mean, hi),
		fmt.Sprintf("%s / %s", fmtDur(r.perAcq(r.holdSum)), fmtDur(r.perAcq(r.releaseSum))),
		strconv.FormatInt(r.gaveUp, 10),
		strconv.FormatInt(r.errs, 10),
		strconv.FormatInt(r.violations, 10),
	)
}

// rateName names what a scenario's rate counts.
func rateName(sc scenario) string {
	if sc.sets() && sc.contended {
		return "sets/s (row / column)"
	}
	return "cycles/s (row / column)"
}
