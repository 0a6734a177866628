package temporaltest_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

// TestStartClusterRunsOnPostgreSQL: StartCluster's server keeps its state in
// PostgreSQL (both stores postgres12) with deploy/temporal/cluster.yaml's
// history shards, has gpugov's search attributes on the namespace default,
// and its databases are gone once the test's cleanup has run.
func TestStartClusterRunsOnPostgreSQL(t *testing.T) {
	var dbNames []string
	t.Run("cluster", func(t *testing.T) {
		srv := temporaltest.StartCluster(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		info, err := srv.Client.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if info.GetHistoryShardCount() != temporaltest.ClusterShards {
			t.Errorf("history shards = %d, want %d", info.GetHistoryShardCount(), temporaltest.ClusterShards)
		}
		if info.GetPersistenceStore() != "postgres12" || info.GetVisibilityStore() != "postgres12" {
			t.Errorf("stores = %q, %q, want postgres12 for both", info.GetPersistenceStore(), info.GetVisibilityStore())
		}
		sas, err := srv.Client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range temporalx.SearchAttributeKeys {
			if _, ok := sas.GetCustomAttributes()[k.GetName()]; !ok {
				t.Errorf("search attribute %s not registered", k.GetName())
			}
		}
		dbNames = clusterDatabases(t)
		if len(dbNames) < 2 {
			t.Fatalf("databases of the running server: %v, want its store and visibility databases", dbNames)
		}
	})
	if len(dbNames) == 0 { // the subtest skipped (-short, no server built) or failed
		return
	}
	left := map[string]bool{}
	for _, n := range clusterDatabases(t) {
		left[n] = true
	}
	for _, n := range dbNames {
		if left[n] {
			t.Errorf("database %s left after the test", n)
		}
	}
}

// clusterDatabases lists the databases StartCluster creates for this test.
func clusterDatabases(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, temporaltest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'temporal_test_teststartclusterrunsonpostgresql%'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestClusterShardsMatchTheConfig: ClusterShards is the shard count
// deploy/temporal/cluster.yaml states.
func TestClusterShardsMatchTheConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "temporal", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*numHistoryShards:\s*(\d+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("cluster.yaml states no numHistoryShards")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != temporaltest.ClusterShards {
		t.Errorf("cluster.yaml numHistoryShards = %d, ClusterShards = %d", n, temporaltest.ClusterShards)
	}
}
