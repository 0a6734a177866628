package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
)

func init() {
	var o apiclient.NotificationOptions
	cmd := &cobra.Command{
		Use:   "notifications",
		Short: "The submitter notifications sent to the projects' webhooks, newest first, with their delivery state (dead: every attempt failed)",
		Args:  cobra.NoArgs,
	}
	l := addListFlags(cmd, &o.Limit)
	cmd.Flags().StringVar(&o.Project, "project", "", "only this project (a submitter token sees only its own)")
	cmd.Flags().StringVar(&o.Job, "job", "", "only this job's")
	cmd.Flags().StringVar(&o.State, "state", "", "only this state: pending, delivered, dead, unrouted")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := l.client()
		if err != nil {
			return err
		}
		list, err := client.Notifications(cmd.Context(), o)
		return show(cmd, l, list, err, printNotifications)
	}
	rootCmd.AddCommand(cmd)
}

// printNotifications writes one line per notification, or says there are none.
func printNotifications(w io.Writer, l *api.NotificationList) error {
	if len(l.Notifications) == 0 {
		_, err := fmt.Fprintln(w, "no notifications (none written, or none match the filters)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tPROJECT\tJOB\tTYPE\tSTATE\tATTEMPTS\tLAST ERROR")
	for _, n := range l.Notifications {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.CreatedAt.Format(timeLayout), n.Project, n.JobID,
			n.Type, n.State, n.Attempts, dash(n.LastError))
	}
	return tw.Flush()
}
