// Package temporalx holds gpugov's shared Temporal wiring: task-queue names, the
// custom search-attribute keys (docs/design.md §3), dialing a client with gpugov's
// logger and interceptors, and registering the search attributes on a namespace.
// Workflows, activities, the API and the CLI use these names so they agree.
package temporalx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// Task queues.
const (
	// ServiceTaskQueue is where `gpugov serve` polls for every workflow and for the
	// store-backed activities (scheduling cycle, run bookkeeping).
	ServiceTaskQueue = "gpugov"
	// SchedulerTaskQueue is where `gpugov serve` polls for the scheduler
	// workflows it starts (workflows.SchedulerInput.TaskQueue), their cycle
	// activities and the preemption workflows they start as children: a
	// worker of its own, so that a cycle's workflow and activity tasks never
	// wait behind thousands of job workflow tasks on ServiceTaskQueue
	// (docs/design.md §3). The worker registers everything the service
	// worker does.
	SchedulerTaskQueue = "gpugov-scheduler"
	// SimExecutorTaskQueue is where the simulated executor polls for run activities.
	SimExecutorTaskQueue = "sim-executor"
	// nodeTaskQueuePrefix prefixes a node agent's task queue.
	nodeTaskQueuePrefix = "node/"
)

// NodeTaskQueue returns the task queue the agent of the named node polls for run
// activities: "node/<name>".
func NodeTaskQueue(node string) string { return nodeTaskQueuePrefix + node }

// Custom search attributes, all of type Keyword, set by gpugov workflows so that
// users find any job, preemption, reclaim or experiment in the Temporal UI.
var (
	// QueueKey is the job's queue name.
	QueueKey = temporal.NewSearchAttributeKeyKeyword("GpugovQueue")
	// TierKey is the job's tier name (production, key-project, standard, experiment).
	TierKey = temporal.NewSearchAttributeKeyKeyword("GpugovTier")
	// PoolKey is the pool the job asked for.
	PoolKey = temporal.NewSearchAttributeKeyKeyword("GpugovPool")
	// WaitReasonKey is the job's current wait-reason code; unset while not waiting.
	WaitReasonKey = temporal.NewSearchAttributeKeyKeyword("GpugovWaitReason")
	// JobStateKey is the job's state (submitted, waiting, placed, running, succeeded, failed, cancelled).
	JobStateKey = temporal.NewSearchAttributeKeyKeyword("GpugovJobState")
	// ExperimentStateKey is a policy experiment's state (scheduled,
	// baseline, running, finished, aborted); its GpugovPool is the scope's
	// first pool.
	ExperimentStateKey = temporal.NewSearchAttributeKeyKeyword("GpugovExperimentState")
)

// SearchAttributeKeys lists every custom search attribute gpugov uses.
var SearchAttributeKeys = []temporal.SearchAttributeKeyKeyword{QueueKey, TierKey, PoolKey, WaitReasonKey, JobStateKey,
	ExperimentStateKey}

// DevServerSearchAttributeArgs returns the `--search-attribute NAME=Keyword` flags
// that register gpugov's search attributes on `temporal server start-dev`.
func DevServerSearchAttributeArgs() []string {
	args := make([]string, 0, 2*len(SearchAttributeKeys))
	for _, k := range SearchAttributeKeys {
		args = append(args, "--search-attribute", k.GetName()+"=Keyword")
	}
	return args
}

// ClientOptions is what Dial needs. Zero values take Temporal's defaults.
type ClientOptions struct {
	HostPort     string // e.g. "127.0.0.1:7233"; "" means client.DefaultHostPort
	Namespace    string // "" means "default"
	Logger       *slog.Logger
	Interceptors []interceptor.ClientInterceptor // e.g. the OpenTelemetry tracing interceptor
}

// Dial connects a Temporal client, logging through slog. It returns the SDK's
// error when the server cannot be reached (the SDK checks the connection at dial).
func Dial(ctx context.Context, o ClientOptions) (client.Client, error) {
	opts := client.Options{
		HostPort:     o.HostPort,
		Namespace:    o.Namespace,
		Interceptors: o.Interceptors,
		// No gzip (the SDK's default): gpugov's payloads are small (IDs,
		// states, a cycle's placements), and compressing every request
		// cost CPU on both ends of each call: about 8 % of serve's CPU in a
		// profile of the lifecycle benchmark (docs/design.md "Throughput
		// against the floor").
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	}
	if o.Logger != nil {
		opts.Logger = tlog.NewStructuredLogger(o.Logger)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %q: %w", o.HostPort, err)
	}
	return c, nil
}

// RegisterSearchAttributes adds gpugov's custom search attributes to namespace
// (idempotent: attributes that already exist are fine). A production cluster's
// operator may have registered them already; the dev server gets them from
// DevServerSearchAttributeArgs. It returns the operator service's error otherwise.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	if namespace == "" {
		namespace = client.DefaultNamespace
	}
	existing, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, k := range SearchAttributeKeys {
		if _, ok := existing.GetCustomAttributes()[k.GetName()]; !ok {
			missing[k.GetName()] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        namespace,
		SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes to namespace %q: %w", namespace, err)
	}
	return nil
}
