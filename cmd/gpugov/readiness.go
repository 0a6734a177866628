package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/store"
)

// This file holds `gpugov drill` (a resume drill: POST /v1/jobs/{id}/drill)
// and `gpugov pool readiness` (GET /v1/pools/{pool}/readiness); see
// docs/design.md §4 "Pool readiness" and §5 "Resume drills".

func init() {
	rootCmd.AddCommand(drillCmd(), poolCmd())
}

// drillCmd is `gpugov drill JOB-ID [--reason TEXT]`.
func drillCmd() *cobra.Command {
	var reason, format string
	cmd := &cobra.Command{
		Use:   "drill JOB-ID [--reason TEXT]",
		Short: "Run a resume drill on a running checkpointable job (operator)",
		Long: `drill runs the full preemption workflow — notify, checkpoint, release,
reschedule, verify-resume — on a running checkpointable job, with no job
waiting for its GPUs: the job saves, stops, is placed again and must resume
from its saved step. The drill is recorded as a preemption of kind drill with
its effective run loss (gpugov preemptions ID), and its verified or failed
resume becomes the evidence of the job's recovery profile, which the
preemption gate and pool readiness read. An operator or an admin may call it;
it is audited with the token's name and --reason.

A job that is not running, not checkpointable, protected, already in a
preemption or drill, or whose queue is inside a protection window is refused
(the message says which).
Exit codes: 0 started, 2 bad arguments or a refusal (403, 404, 409), 1 server or network failure.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the drill's record)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		out, _, err := client.Drill(cmd.Context(), args[0], reason)
		return showResult(cmd, format, out, err, func(w io.Writer, out *api.DrillStarted) error {
			fmt.Fprintf(w, "drill %s started on job %s (follow it with: gpugov preemptions %s)\n", out.Drill.ID, out.Drill.VictimJobID, out.Drill.ID)
			if out.Note != "" {
				fmt.Fprintln(w, "note: "+out.Note)
			}
			return printPreemption(w, &out.Drill)
		})
	}
	return cmd
}

// poolCmd is `gpugov pool` with its subcommand readiness.
func poolCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Pool governance: readiness for a wider automation stage"}
	var format string
	var history int
	rc := &cobra.Command{
		Use:   "readiness POOL",
		Short: "Whether a pool is ready for a wider automation stage, with the numbers, and its stage history",
		Long: `readiness evaluates, under the active policy version's thresholds, the four
preconditions of a wider automation stage — wait reasons recorded, running and
idle distinguishable, protection explicit, save and restore proven — and the
four questions over the last window against the one before — is the longest
wait down, are low-priority jobs still served, are key jobs still guaranteed,
is the recovery loss within the budget — and lists the pool's latest stage
changes. A policy that widens the pool's stage is refused unless every check
passes (or an admin overrides it). Any role but agent may call it.
Exit codes: 0 shown (ready or not), 2 bad arguments or an unknown pool, 1 server or network failure.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(rc.Flags())
	rc.Flags().StringVar(&format, "format", "text", "output: text or json")
	rc.Flags().IntVar(&history, "history", 0, "list this many stage changes (1..1000; default 10)")
	rc.RunE = func(cmd *cobra.Command, args []string) error {
		if rc.Flags().Changed("history") && (history < 1 || history > store.MaxListLimit) {
			return newUsageError("--history %d: want 1..%d", history, store.MaxListLimit)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		r, err := client.PoolReadiness(cmd.Context(), args[0], history)
		return showResult(cmd, format, r, err, printReadiness)
	}
	cmd.AddCommand(rc)
	return cmd
}

// printReadiness writes a pool's readiness: the verdict, each check with
// its numbers, the protection windows, the checkpointable profiles and the
// stage history.
func printReadiness(w io.Writer, r *api.PoolReadiness) error {
	verdict := "ready: every check passed"
	if !r.Ready {
		names := make([]string, len(r.Failed))
		for i, f := range r.Failed {
			names[i] = string(f)
		}
		verdict = "not ready: " + strings.Join(names, ", ") + " failed"
	}
	policyHash := "the default policy"
	if r.PolicyHash != "" {
		policyHash = "policy " + r.PolicyHash[:min(12, len(r.PolicyHash))]
	}
	fmt.Fprintf(w, "pool %s (stage %s): %s\n", r.Pool, r.Stage, verdict)
	fmt.Fprintf(w, "window %s – %s against %s – %s; thresholds of %s\n\n", r.Window.From.UTC().Format(timeLayout),
		r.Window.To.UTC().Format(timeLayout), r.Previous.From.UTC().Format(timeLayout), r.Previous.To.UTC().Format(timeLayout), policyHash)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tKIND\tRESULT\tNUMBERS")
	for _, c := range r.Checks {
		kind, result := "question", "fail"
		if c.Precondition {
			kind = "precondition"
		}
		if c.Passed {
			result = "pass"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Check, kind, result, c.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.ProtectionWindows) == 0 {
		fmt.Fprintln(w, "\nprotection windows: none")
	} else {
		fmt.Fprintln(w, "\nprotection windows:")
		for _, pw := range r.ProtectionWindows {
			queues := "every queue"
			if len(pw.Queues) > 0 {
				queues = strings.Join(pw.Queues, ", ")
			}
			active := ""
			if pw.Active {
				active = " (active now)"
			}
			fmt.Fprintf(w, "  %s: %s – %s, %s%s\n", pw.Name, pw.Start.UTC().Format(timeLayout), pw.End.UTC().Format(timeLayout), queues, active)
		}
	}
	if len(r.Profiles) > 0 {
		fmt.Fprintln(w, "\ncheckpointable profiles:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  PROFILE\tJOBS\tVERIFIED\tFAILED")
		for _, p := range r.Profiles {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", p.Profile, p.Jobs, p.Verified, p.Failed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.History) == 0 {
		_, err := fmt.Fprintln(w, "\nstage history: none")
		return err
	}
	fmt.Fprintln(w, "\nstage history (newest first):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tFROM\tTO\tOUTCOME\tACTOR\tSOURCE\tFAILED CHECKS\tREASON")
	for _, h := range r.History {
		failed := "-"
		if len(h.Failed) > 0 {
			names := make([]string, len(h.Failed))
			for i, f := range h.Failed {
				names[i] = string(f)
			}
			failed = strings.Join(names, ",")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.At.UTC().Format(timeLayout), h.From, h.To, h.Outcome, h.Actor,
			dash(h.Source), failed, h.Reason)
	}
	return tw.Flush()
}
