package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTokensNeverLogged: requests with a valid, an unknown and a refused
// token, through the otelgin middleware serve uses and a debug logger, leave
// the token in no span attribute, span event or log line.
func TestTokensNeverLogged(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newTestEnv(t, WithMiddleware(otelgin.Middleware("gpugov", otelgin.WithTracerProvider(tp))), WithLogger(logger))
	const unknown = "tok-unknown-secret"
	e.do(http.MethodGet, "/v1/queues", tokAlice, nil)
	e.do(http.MethodGet, "/v1/audit", tokAlice, nil) // 403
	e.do(http.MethodGet, "/v1/queues", unknown, nil) // 401
	e.do(http.MethodPost, "/v1/jobs", tokBob, "{bad json")
	spans := rec.Ended()
	if len(spans) < 4 {
		t.Fatalf("%d spans recorded, want one per request", len(spans))
	}
	var seen strings.Builder
	for _, s := range spans {
		seen.WriteString(s.Name())
		for _, a := range s.Attributes() {
			seen.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
		for _, ev := range s.Events() {
			seen.WriteString(" " + ev.Name)
			for _, a := range ev.Attributes {
				seen.WriteString(" " + a.Value.String())
			}
		}
	}
	seen.WriteString(logs.String())
	for _, tok := range []string{tokAlice, tokBob, unknown} {
		if strings.Contains(seen.String(), tok) {
			t.Errorf("token %s appears in spans or logs: %s", tok, seen.String())
		}
	}
}
