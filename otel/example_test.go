package locksmithotel_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"github.com/alicebob/miniredis/v2"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/locksmith-go/locksmith"
	locksmithotel "github.com/locksmith-go/locksmith/otel"
)

// Prometheus through OpenTelemetry: the OTel Prometheus exporter is the
// reader of a MeterProvider, locksmithotel records to that provider, and
// the registry is what a /metrics handler (promhttp.HandlerFor) serves.
func Example_prometheus() {
	mr, err := miniredis.Run() // stands in for your Redis
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	registry := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(registry), prometheus.WithoutScopeInfo(),
		prometheus.WithoutTargetInfo())
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())

	tel, err := locksmithotel.New(locksmithotel.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}
	locker := locksmith.New(client, tel.Options()...)
	err = locker.WithLock(context.Background(), "report", func(ctx context.Context) error {
		return nil // the job
	})
	if err != nil {
		log.Fatal(err)
	}
	// Events are delivered in the background; Close delivers those
	// still buffered. (A server exports as it goes and need not close.)
	locker.Close()

	printSeries(registry, "_count", "_total", "_active")
	// Output:
	// locksmith_lock_hold_duration_seconds_count{locksmith_hold="lock",locksmith_outcome="ok"} 1
	// locksmith_lock_obtain_active{locksmith_hold="lock"} 0
	// locksmith_lock_obtain_attempts_count{locksmith_hold="lock",locksmith_outcome="ok"} 1
	// locksmith_lock_obtain_duration_seconds_count{locksmith_hold="lock",locksmith_outcome="ok"} 1
}

// printSeries prints, sorted, the series of the registry whose name
// starts with locksmith_ and contains one of parts: the deterministic
// ones (counts, not durations).
func printSeries(g promclient.Gatherer, parts ...string) {
	families, err := g.Gather()
	if err != nil {
		log.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			log.Fatal(err)
		}
	}
	var lines []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		if !strings.HasPrefix(line, "locksmith_") {
			continue
		}
		for _, p := range parts {
			if strings.Contains(name, p) {
				lines = append(lines, line)
				break
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}
