package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// runGpugov runs the gpugov command line args on rootCmd with ctx, after
// resetting the flags of every command, nested ones included, and returns
// stdout, stderr and the error.
func runGpugov(ctx context.Context, args ...string) (string, string, error) {
	var reset func(c *cobra.Command)
	reset = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
		// cobra gives a subcommand its parent's context only when it has
		// none: without this, every later run would keep the first run's.
		c.SetContext(nil) //lint:ignore SA1012 nil is how cobra marks "no context yet"
		for _, sub := range c.Commands() {
			reset(sub)
		}
	}
	reset(rootCmd)
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	rootCmd.SetErr(&stderr)
	rootCmd.SetArgs(args)
	err := rootCmd.ExecuteContext(ctx)
	rootCmd.SetArgs(nil)
	return stdout.String(), stderr.String(), err
}

// TestInventoryImport imports an Alibaba node list into a fresh database:
// the counts are printed, the default queues created once, and the store
// holds the nodes; a YAML file imports one selected pool.
func TestInventoryImport(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	out, _, err := runGpugov(ctx, "inventory", "import", "../../internal/trace/alibaba/testdata/nodes_good.csv", "--database-url", url)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"imported pool alibaba: 3 nodes, 18 GPUs (G2 8, V100M32 8, T4 2)", "created the default queues"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runGpugov(ctx, "inventory", "import", "../../internal/inventory/static/testdata/inventory.yaml",
		"--pool", "t4-west", "--database-url", url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "imported pool t4-west:") || strings.Contains(out, "created the default queues") {
		t.Errorf("second import output:\n%s", out)
	}
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pools, err := st.GetInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, p := range pools {
		names[p.Name] = len(p.Nodes)
	}
	if names["alibaba"] != 3 || names["t4-west"] == 0 || len(names) != 2 {
		t.Errorf("stored pools %v, want alibaba (3 nodes) and t4-west", names)
	}
}

// TestInventoryImportBadInput: a malformed file is reported as file:line
// with exit code 2, as are an unknown format and a missing file.
func TestInventoryImportBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "nodes.csv")
	if err := os.WriteFile(bad, []byte("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,H900\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err := runGpugov(ctx, "inventory", "import", bad, "--database-url", "postgres://nowhere.invalid/x")
	if !isUsageError(err) || !strings.HasPrefix(err.Error(), bad+":2: ") {
		t.Errorf("bad row: %v (usage error %v), want %s:2: …", err, isUsageError(err), bad)
	}
	if _, _, err := runGpugov(ctx, "inventory", "import", bad, "--format", "xml"); !isUsageError(err) {
		t.Errorf("unknown format: %v, want a usage error", err)
	}
	if _, _, err := runGpugov(ctx, "inventory", "import", filepath.Join(t.TempDir(), "none.csv")); !isUsageError(err) {
		t.Errorf("missing file: %v, want a usage error", err)
	}
}
