package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/store/storetest"
)

const (
	nodesCSV  = "../internal/trace/alibaba/testdata/nodes_good.csv"
	inventory = "../internal/inventory/static/testdata/inventory.yaml"
)

func TestLoadInventoryFileCSV(t *testing.T) {
	pools, err := LoadInventoryFile(nodesCSV, FormatAuto, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 {
		t.Fatalf("%d pools, want 1", len(pools))
	}
	got := CountPool(pools[0]).String()
	if want := "pool alibaba: 3 nodes, 18 GPUs (G2 8, V100M32 8, T4 2)"; got != want {
		t.Errorf("counts %q, want %q (the CPU-only node left out)", got, want)
	}
	// Without the extension the header decides; --pool names the pool.
	copyPath := filepath.Join(t.TempDir(), "nodes")
	data, err := os.ReadFile(nodesCSV)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	pools, err = LoadInventoryFile(copyPath, FormatAuto, "east")
	if err != nil || len(pools) != 1 || pools[0].Name != "east" {
		t.Errorf("header-detected CSV with pool east: %v, %v", pools, err)
	}
}

func TestLoadInventoryFileYAML(t *testing.T) {
	pools, err := LoadInventoryFile(inventory, FormatAuto, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 2 {
		t.Fatalf("%d pools, want 2", len(pools))
	}
	pools, err = LoadInventoryFile(inventory, FormatYAML, "t4-west")
	if err != nil || len(pools) != 1 || pools[0].Name != "t4-west" {
		t.Errorf("pool t4-west: %v, %v", pools, err)
	}
	if _, err := LoadInventoryFile(inventory, FormatAuto, "nowhere"); err == nil || !strings.Contains(err.Error(), "a100-east, t4-west") {
		t.Errorf("missing pool: %v, want the file's pools listed", err)
	}
}

func TestLoadInventoryFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(bad, []byte("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,two,T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadInventoryFile(bad, FormatAuto, ""); err == nil || !strings.HasPrefix(err.Error(), bad+":2: ") {
		t.Errorf("bad CSV row: %v, want %s:2: …", err, bad)
	}
	badYAML := filepath.Join(dir, "inv.yaml")
	if err := os.WriteFile(badYAML, []byte("pools:\n  - name: p\n    nodes:\n      - name: n\n        gpus:\n          - {uuid: u, model: T4, memory_mib: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadInventoryFile(badYAML, FormatAuto, ""); err == nil || !strings.HasPrefix(err.Error(), badYAML+":6: ") {
		t.Errorf("bad YAML: %v, want %s:6: …", err, badYAML)
	}
	if _, err := LoadInventoryFile(nodesCSV, "xml", ""); err == nil || !strings.Contains(err.Error(), "unknown inventory format") {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := LoadInventoryFile(filepath.Join(dir, "missing"), FormatAuto, ""); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestEnsureDefaultQueues(t *testing.T) {
	ctx := context.Background()
	st, _ := storetest.NewStore(t, storetest.Fixture{})
	created, err := EnsureDefaultQueues(ctx, st)
	if err != nil || !created {
		t.Fatalf("first call: created %v, %v", created, err)
	}
	qs, err := st.ListQueues(ctx)
	if err != nil || len(qs) != 4 {
		t.Fatalf("queues %v, %v; want one per tier", qs, err)
	}
	for _, q := range qs {
		if q.Name != q.Tier.String() {
			t.Errorf("queue %q has tier %s; default queues are named after their tier", q.Name, q.Tier)
		}
	}
	if created, err := EnsureDefaultQueues(ctx, st); err != nil || created {
		t.Errorf("second call: created %v, %v; want nothing created", created, err)
	}
}
