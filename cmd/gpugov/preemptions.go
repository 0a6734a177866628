package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/apiclient"
)

func init() {
	var format string
	var o apiclient.PreemptionOptions
	cmd := &cobra.Command{
		Use:   "preemptions [ID]",
		Short: "List preemptions (or show one): steps, checkpoints, resume check, effective run loss",
		Args:  cobra.MaximumNArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	cmd.Flags().StringVar(&o.State, "state", "", "only this state: in_progress, released, aborted, observed")
	cmd.Flags().StringVar(&o.Outcome, "outcome", "", "only this outcome, e.g. completed, resume_failed, would_preempt")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "only this pool")
	cmd.Flags().StringVar(&o.Job, "job", "", "only preemptions for or of this job")
	cmd.Flags().IntVar(&o.Limit, "limit", 0, "at most this many (1..1000; default 100)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkFormat(format, "table", "json"); err != nil {
			return err
		}
		if o.Limit < 0 || o.Limit > 1000 {
			return newUsageError("--limit %d: want 1..1000", o.Limit)
		}
		client, err := newClient()
		if err != nil {
			return newUsageError("%w", err)
		}
		if len(args) == 1 {
			p, err := client.Preemption(cmd.Context(), args[0])
			if err != nil {
				return apiFailure(err)
			}
			if format == "json" {
				return printJSON(cmd.OutOrStdout(), p)
			}
			return printPreemption(cmd.OutOrStdout(), p)
		}
		list, err := client.Preemptions(cmd.Context(), o)
		if err != nil {
			return apiFailure(err)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), list)
		}
		return printPreemptions(cmd.OutOrStdout(), list)
	}
	rootCmd.AddCommand(cmd)
}

// printPreemptions writes one line per preemption.
func printPreemptions(w io.Writer, l *api.PreemptionList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tOUTCOME\tFOR JOB\tVICTIM\tGPUS\tEST LOSS\tLOSS (GPU-s)\tRESUMED OK")
	for _, p := range l.Preemptions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%g\t%.0f\t%s\t%s\n", p.ID, p.State, dash(p.Outcome), p.ForJobID, p.VictimJobID,
			p.GPUs, p.EstimatedLossGPUSeconds, floatOrDash(p.EffectiveLossGPUSeconds), boolOrDash(p.ResumedCorrectly))
	}
	return tw.Flush()
}

// printPreemption writes one preemption's record, step by step.
func printPreemption(w io.Writer, p *api.Preemption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Preemption", p.ID+" ("+p.State+", "+dash(p.Outcome)+")")
	row("For", p.ForJobID+" in queue "+p.ForQueue+": "+p.Reason)
	row("Victim", fmt.Sprintf("%s in queue %s, run %s, %g GPU(s)", p.VictimJobID, p.VictimQueue, dash(p.RunID), p.GPUs))
	if cp := p.CheckpointAtNotice; cp != nil {
		row("Checkpoint at notice", fmt.Sprintf("step %d at %s", cp.Step, cp.At.Format(timeLayout)))
	}
	row("Notified", timeOrDash(p.NotifiedAt))
	row("Saved", timeOrDash(p.SavedAt)+checkpointText(p.SavedCheckpoint))
	row("Released", timeOrDash(p.ReleasedAt))
	row("Rescheduled", timeOrDash(p.RescheduledAt))
	row("Resumed", timeOrDash(p.ResumedAt)+stepText(p.ResumedFromStep)+" correct: "+boolOrDash(p.ResumedCorrectly))
	row("Back at notice step", timeOrDash(p.PassedAt)+stepText(p.StepAtNotice))
	row("Loss", fmt.Sprintf("%s GPU-s = %g GPU(s) × (lost %s + save/restore %s + recompute %s) s; estimated %.0f",
		floatOrDash(p.EffectiveLossGPUSeconds), p.GPUs, floatOrDash(p.LostSeconds), floatOrDash(p.SaveRestoreSeconds),
		floatOrDash(p.RecomputeSeconds), p.EstimatedLossGPUSeconds))
	for _, f := range p.Failures {
		row("Failure", f)
	}
	if p.Detail != "" {
		row("Detail", p.Detail)
	}
	return tw.Flush()
}

// timeLayout is how governance commands print times (UTC, seconds).
const timeLayout = "2006-01-02 15:04:05Z07:00"

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func floatOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

func boolOrDash(v *bool) string {
	if v == nil {
		return "-"
	}
	return yesNo(*v)
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

func stepText(s *int64) string {
	if s == nil {
		return ""
	}
	return " at step " + strconv.FormatInt(*s, 10)
}

func checkpointText(cp *api.Checkpoint) string {
	if cp == nil {
		return ""
	}
	return fmt.Sprintf(" (checkpoint step %d, %s)", cp.Step, cp.Location)
}
