package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/plural"
)

func init() {
	var o apiclient.ReclaimOptions
	cmd := &cobra.Command{
		Use:   "reclaims",
		Short: "The reclaim report: failed, idle and completed allocations, modes, notices, GPUs released, disputes",
		Args:  cobra.NoArgs,
	}
	l := addListFlags(cmd, &o.Limit)
	cmd.Flags().StringVar(&o.Class, "class", "", "only this class: failed, idle, completed")
	cmd.Flags().StringVar(&o.Mode, "mode", "", "only this mode: report, notify, auto, confirm")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "only this pool")
	cmd.Flags().StringVar(&o.State, "state", "", "only this state, e.g. notified, awaiting_confirmation, released, kept")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := l.client()
		if err != nil {
			return err
		}
		rep, err := client.Reclaims(cmd.Context(), o)
		return show(cmd, l, rep, err, printReclaims)
	}
	cmd.AddCommand(reclaimDecisionCmd("confirm", "Approve a reclaim's release (operator or admin token)", (*apiclient.Client).ConfirmReclaim))
	cmd.AddCommand(reclaimDecisionCmd("keep", "Keep your allocation: object to its reclaim, recorded as a dispute", (*apiclient.Client).KeepReclaim))
	cmd.AddCommand(reclaimDisputeCmd("dispute", "Dispute a released reclaim (a false kill) within the policy's dispute window (owning project)",
		(*apiclient.Client).DisputeReclaim))
	cmd.AddCommand(reclaimDisputeCmd("reject-dispute", "Reject a reclaim's dispute: the reclaim was right (operator or admin token)",
		(*apiclient.Client).RejectReclaimDispute))
	rootCmd.AddCommand(cmd)
}

// reclaimDecisionCmd is `gpugov reclaims confirm|keep ID --reason …`.
func reclaimDecisionCmd(verb, short string, call func(*apiclient.Client, context.Context, string, string) (*api.Reclaim, error)) *cobra.Command {
	var reason string
	cmd := &cobra.Command{Use: verb + " ID", Short: short, Args: cobra.ExactArgs(1)}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why (goes to the audit log)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, "")
		if err != nil {
			return err
		}
		r, err := call(client, cmd.Context(), args[0], reason)
		if err != nil {
			return apiFailure(err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s sent to reclaim %s (allocation %s, %s, mode %s)\n", verb, r.ID, r.AllocationID, r.Class, r.Mode)
		return nil
	}
	return cmd
}

// printReclaims writes the reclaims and the totals, or says there are none.
func printReclaims(w io.Writer, rep *api.ReclaimReport) error {
	if len(rep.Reclaims) == 0 {
		_, err := fmt.Fprintln(w, "no reclaims (none recorded, or none match the filters)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCLASS\tMODE\tSTATE\tPOOL\tQUEUE\tJOB\tGPUS\tRELEASED\tDISPUTED\tBASIS")
	for _, r := range rep.Reclaims {
		disputed := yesNo(r.Disputed)
		if r.Disputed && !r.FalseReclaim {
			disputed = "rejected"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%g\t%g\t%s\t%s\n", r.ID, r.Class, r.Mode, r.State, r.Pool, r.Queue, r.JobID,
			r.GPUs, r.GPUsReleased, disputed, r.Basis)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := rep.Summary
	_, err := fmt.Fprintf(w, "\n%s: by class %s; by mode %s; %s released; %d disputed, %s (disputes not rejected)\n",
		plural.Count(len(rep.Reclaims), "reclaim", "reclaims"), counts(s.ByClass), counts(s.ByMode), gpusText(s.GPUsReleased), s.Disputed,
		plural.Count(s.FalseReclaims, "false reclaim", "false reclaims"))
	return err
}

// counts renders a count map as "a 1, b 2" in key order.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d", k, m[k])
	}
	if out == "" {
		return "none"
	}
	return out
}
