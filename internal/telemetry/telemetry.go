// Package telemetry sets up gpugov's OpenTelemetry providers: metrics exported
// to Prometheus through the OTel Prometheus exporter (served at /metrics), and
// traces exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Instrumentation of HTTP (otelgin),
// PostgreSQL (otelpgx) and Temporal (its OTel interceptor) uses the providers
// installed here as the globals.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Telemetry holds the installed providers and the Prometheus registry behind
// /metrics. Besides gpugov's own instruments the registry carries the Go
// runtime's (go_memstats_*, go_goroutines, and go_gc_heap_live_bytes: the heap
// marked live by the last GC, in bytes) and the process's
// (process_resident_memory_bytes, process_open_fds, …), which `gpugov load`
// samples for its memory trend (docs/design.md §8).
type Telemetry struct {
	registry       *prometheus.Registry
	meterProvider  *sdkmetric.MeterProvider
	tracerProvider *sdktrace.TracerProvider
	// Metrics are gpugov's own instruments, created on the meter provider above.
	Metrics *Metrics
}

// Setup creates the meter and tracer providers for the named service, installs
// them (and the W3C trace-context propagator) as the OTel globals, and creates
// gpugov's instruments. It returns an error when the Prometheus exporter, the
// OTLP exporter or an instrument cannot be created. Call Shutdown on exit.
func Setup(ctx context.Context, serviceName string) (*Telemetry, error) {
	res := resource.NewSchemaless(attribute.String("service.name", serviceName))
	registry := prometheus.NewRegistry()
	registry.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	tp, err := newTracerProvider(ctx, res)
	if err != nil {
		return nil, err
	}
	metrics, err := NewMetrics(mp.Meter("github.com/gpugov/gpugov"))
	if err != nil {
		return nil, err
	}
	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Telemetry{registry: registry, meterProvider: mp, tracerProvider: tp, Metrics: metrics}, nil
}

// newTracerProvider samples every span; spans leave the process only when an
// OTLP endpoint is configured, so a local run needs no collector.
func newTracerProvider(ctx context.Context, res *resource.Resource) (*sdktrace.TracerProvider, error) {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// Handler serves the Prometheus text exposition of every gpugov metric.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops both providers; it returns their joined errors.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.meterProvider.Shutdown(ctx), t.tracerProvider.Shutdown(ctx))
}
