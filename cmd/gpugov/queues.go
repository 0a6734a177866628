package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
)

func init() {
	var format string
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List the queues: tier, service share, wait objective, protection",
		Args:  cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := connect(newClient, format, "table", "json")
		if err != nil {
			return err
		}
		qs, err := client.Queues(cmd.Context())
		return showResult(cmd, format, qs, err, printQueues)
	}
	rootCmd.AddCommand(cmd)
}

// printQueues writes the queues as a table.
func printQueues(w io.Writer, qs *api.QueueList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTIER\tSHARE\tMIN SHARE\tMAX SHARE\tMAX WAIT\tLOW RISK\tPROTECTED")
	for _, q := range qs.Queues {
		maxWait := "-"
		if q.MaxWaitSec > 0 {
			maxWait = formatDuration(time.Duration(q.MaxWaitSec * float64(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%s\t%s\t%s\t%s\t%s\n", q.Name, q.Tier, q.ServiceShare, shareCell(q.MinShare), shareCell(q.MaxShare),
			maxWait, yesNo(q.LowRisk), yesNo(q.Protected))
	}
	return tw.Flush()
}

// shareCell renders a pool share (min_share, max_share) as a percentage, "-" for none.
func shareCell(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%g%%", v*100)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
