package locksmithotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
	locksmithotel "github.com/locksmith-go/locksmith/otel"
)

// BenchmarkObtainRelease is one Obtain + Release cycle on a real Redis:
// without telemetry, with locksmithotel on OpenTelemetry's no-op
// providers (the globals when nothing is set), and with the SDK's
// providers recording every metric and sampling every span (with no
// exporter, so that only the recording is measured).
//
//	go test -run '^$' -bench . -benchmem
func BenchmarkObtainRelease(b *testing.B) {
	srv := redistest.New(b)
	ctx := context.Background()
	run := func(b *testing.B, opts ...locksmith.Option) {
		l := locksmith.New(srv.Client(b), opts...)
		b.Cleanup(func() { _ = l.Close() })
		b.ReportAllocs()
		for b.Loop() {
			lk, err := l.Obtain(ctx, "bench:otel")
			if err != nil {
				b.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("off", func(b *testing.B) { run(b) })
	b.Run("otel-noop", func(b *testing.B) {
		tel, err := locksmithotel.New()
		if err != nil {
			b.Fatal(err)
		}
		run(b, tel.Options()...)
	})
	b.Run("otel-sdk", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider()
		b.Cleanup(func() {
			_ = mp.Shutdown(context.Background())
			_ = tp.Shutdown(context.Background())
		})
		tel, err := locksmithotel.New(locksmithotel.WithMeterProvider(mp), locksmithotel.WithTracerProvider(tp))
		if err != nil {
			b.Fatal(err)
		}
		run(b, tel.Options()...)
	})
}
