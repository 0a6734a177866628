package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/service"
	"github.com/gpugov/gpugov/store"
)

func init() {
	inv := &cobra.Command{
		Use:   "inventory",
		Short: "Manage the stored GPU inventory",
		Args:  cobra.NoArgs,
	}
	var databaseURL, format, pool string
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "Import pools, nodes and GPUs from a static YAML inventory or an Alibaba node-list CSV",
		Long: `import loads FILE into the store: every pool it names gets exactly the file's
nodes and GPUs (vanished GPUs still allocated are kept, unhealthy, until released);
other pools are untouched. The format is chosen by --format, or by the extension
(.yaml/.yml, .csv), or by the first line (the Alibaba header
sn,cpu_milli,memory_mib,gpu,model). An Alibaba node list forms one pool named
--pool (default "alibaba") of its GPU nodes; with a YAML file --pool imports only
that pool.

When the store has no queue at all, one queue per tier is created (production,
key-project, standard, experiment; shares 4:3:2:1, objectives 60s/10m/1h/6h).
Quotas are not set here: a project without a quota is not limited; set quotas
with serve --policy FILE (its quotas list).

The database is --database-url, else $DATABASE_URL, else the local default; it
must exist (gpugov migrate creates it) and is migrated when needed. The running scheduler sees the new
inventory at its next cycle. A malformed file is reported as file:line: what is
wrong, with exit code 2.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(service.InventoryFormats, format) {
				return newUsageError("--format %q: want auto, yaml or alibaba-csv", format)
			}
			pools, err := service.LoadInventoryFile(args[0], format, pool)
			if err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			url := cmp.Or(databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
			if err := store.Migrate(ctx, url); err != nil {
				return err
			}
			st, err := store.Open(ctx, url)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.UpsertInventory(ctx, pools); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, p := range pools {
				fmt.Fprintf(out, "imported %s\n", service.CountPool(p))
			}
			created, err := service.EnsureDefaultQueues(ctx, st)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintln(out, "created the default queues: production, key-project, standard, experiment")
			}
			return nil
		},
	}
	imp.Flags().StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	imp.Flags().StringVar(&format, "format", service.FormatAuto, "file format: auto, yaml or alibaba-csv")
	imp.Flags().StringVar(&pool, "pool", "", "pool of a CSV's nodes (default \"alibaba\"), or the one pool of a YAML file to import")
	inv.AddCommand(imp)
	rootCmd.AddCommand(inv)
}
