package temporalx_test

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

func TestNames(t *testing.T) {
	if got := temporalx.NodeTaskQueue("gpu-017"); got != "node/gpu-017" {
		t.Fatalf("NodeTaskQueue = %q", got)
	}
	if got := temporalx.JobWorkflowID("j-1"); got != "job/j-1" {
		t.Fatalf("JobWorkflowID = %q", got)
	}
	if got := temporalx.SchedulerWorkflowID(temporalx.DefaultShard); got != "scheduler/default" {
		t.Fatalf("SchedulerWorkflowID = %q", got)
	}
	if got := temporalx.ExperimentWorkflowID("exp-1"); got != "experiment/exp-1" {
		t.Fatalf("ExperimentWorkflowID = %q", got)
	}
	want := "--search-attribute GpugovQueue=Keyword --search-attribute GpugovTier=Keyword --search-attribute GpugovPool=Keyword " +
		"--search-attribute GpugovWaitReason=Keyword --search-attribute GpugovJobState=Keyword " +
		"--search-attribute GpugovExperimentState=Keyword"
	if got := strings.Join(temporalx.DevServerSearchAttributeArgs(), " "); got != want {
		t.Fatalf("DevServerSearchAttributeArgs = %q", got)
	}
}

// TestDialAndRegisterSearchAttributes registers gpugov's search attributes on
// a namespace that lacks them, twice (the second call must change nothing).
func TestDialAndRegisterSearchAttributes(t *testing.T) {
	dev := temporaltest.Start(t)
	ctx := context.Background()
	c, err := temporalx.Dial(ctx, temporalx.ClientOptions{HostPort: dev.HostPort})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ns = "gpugov-test"
	if _, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := temporalx.RegisterSearchAttributes(ctx, c, ns); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range temporalx.SearchAttributeKeys {
		if typ := resp.GetCustomAttributes()[k.GetName()]; typ != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			t.Fatalf("%s registered as %v, want Keyword", k.GetName(), typ)
		}
	}
}

func TestDialFailsWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := temporalx.Dial(ctx, temporalx.ClientOptions{HostPort: "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Dial to a closed port: %v, want an error naming it", err)
	}
}
