package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/store"
)

func init() {
	var o apiclient.PreemptionOptions
	cmd := &cobra.Command{
		Use:   "preemptions [ID]",
		Short: "List preemptions (or show one): steps, checkpoints, resume check, effective run loss",
		Args:  cobra.MaximumNArgs(1),
	}
	l := addListFlags(cmd, &o.Limit)
	cmd.Flags().StringVar(&o.State, "state", "", "only this state: in_progress, released, aborted, observed")
	cmd.Flags().StringVar(&o.Outcome, "outcome", "", "only this outcome, e.g. completed, resume_failed, would_preempt")
	cmd.Flags().StringVar(&o.Pool, "pool", "", "only this pool")
	cmd.Flags().StringVar(&o.Job, "job", "", "only preemptions for or of this job")
	cmd.Flags().StringVar(&o.Kind, "kind", "", "only this kind: preemption or drill")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := l.client()
		if err != nil {
			return err
		}
		if len(args) == 1 {
			p, err := client.Preemption(cmd.Context(), args[0])
			return show(cmd, l, p, err, printPreemption)
		}
		list, err := client.Preemptions(cmd.Context(), o)
		return show(cmd, l, list, err, printPreemptions)
	}
	rootCmd.AddCommand(cmd)
}

// listCmd is what `gpugov preemptions` and `gpugov reclaims` share: the
// --format and --limit flags and the API client's flags.
type listCmd struct {
	format    string
	limit     *int
	flags     *pflag.FlagSet
	newClient func() (*apiclient.Client, error)
}

// addListFlags adds --format, --limit (into limit) and the API client's
// flags to cmd.
func addListFlags(cmd *cobra.Command, limit *int) *listCmd {
	l := &listCmd{limit: limit, flags: cmd.Flags(), newClient: apiclient.AddFlags(cmd.Flags())}
	cmd.Flags().StringVar(&l.format, "format", "table", "output: table or json")
	cmd.Flags().IntVar(limit, "limit", 0, "at most this many (1..1000; default 100)")
	return l
}

// checkLimit refuses a --limit given outside 1..store.MaxListLimit, the
// API's page-size bound, as a usage error (exit code 2); an absent --limit
// leaves the server's default.
func checkLimit(flags *pflag.FlagSet, limit int) error {
	if flags.Changed("limit") && (limit < 1 || limit > store.MaxListLimit) {
		return newUsageError("--limit %d: want 1..%d", limit, store.MaxListLimit)
	}
	return nil
}

// client checks --format and --limit and returns the API client; a bad
// flag is a usage error (exit code 2).
func (l *listCmd) client() (*apiclient.Client, error) {
	if err := checkFormat(l.format, "table", "json"); err != nil {
		return nil, err
	}
	if err := checkLimit(l.flags, *l.limit); err != nil {
		return nil, err
	}
	c, err := l.newClient()
	if err != nil {
		return nil, newUsageError("%w", err)
	}
	return c, nil
}

// show prints what the API answered: v as JSON with --format json, else
// through table; err (the API call's) is reported as an API failure.
func show[T any](cmd *cobra.Command, l *listCmd, v T, err error, table func(io.Writer, T) error) error {
	if err != nil {
		return apiFailure(err)
	}
	if l.format == "json" {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return table(cmd.OutOrStdout(), v)
}

// printPreemptions writes one line per preemption, or says there are none.
func printPreemptions(w io.Writer, l *api.PreemptionList) error {
	if len(l.Preemptions) == 0 {
		_, err := fmt.Fprintln(w, "no preemptions (none recorded, or none match the filters)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tOUTCOME\tFOR JOB\tVICTIM\tGPUS\tEST LOSS\tLOSS (GPU-s)\tRESUMED OK")
	for _, p := range l.Preemptions {
		forJob := p.ForJobID
		if p.Kind == "drill" {
			forJob = "(drill)"
		}
		loss := floatOrDash(p.EffectiveLossGPUSeconds)
		if p.NoLossReason() != "" {
			loss = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%g\t%.0f\t%s\t%s\n", p.ID, p.State, dash(p.Outcome), forJob, p.VictimJobID,
			p.GPUs, p.EstimatedLossGPUSeconds, loss, boolOrDash(p.ResumedCorrectly))
	}
	return tw.Flush()
}

// printPreemption writes one preemption's record, step by step.
func printPreemption(w io.Writer, p *api.Preemption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Preemption", p.ID+" ("+p.State+", "+dash(p.Outcome)+")")
	if p.Kind == "drill" {
		row("Drill", "started by "+p.DrillActor+": "+p.Reason)
	} else {
		row("For", p.ForJobID+" in queue "+p.ForQueue+": "+p.Reason)
	}
	row("Victim", fmt.Sprintf("%s in queue %s, run %s, %s", p.VictimJobID, p.VictimQueue, dash(p.RunID), victimGPUs(p)))
	if cp := p.CheckpointAtNotice; cp != nil {
		row("Checkpoint at notice", fmt.Sprintf("step %d at %s", cp.Step, cp.At.Format(timeLayout)))
	}
	row("Notified", timeOrDash(p.NotifiedAt))
	row("Saved", savedText(p))
	row("Released", timeOrDash(p.ReleasedAt))
	row("Rescheduled", timeOrDash(p.RescheduledAt))
	row("Resumed", timeOrDash(p.ResumedAt)+stepText(p.ResumedFromStep)+" correct: "+boolOrDash(p.ResumedCorrectly))
	row("Resume verified", boolOrDash(p.ResumeVerified)+" (started at the saved step and progressed past it)")
	row("Back at step reached", reachedText(p))
	row("Victim outcome", victimOutcome(p))
	if why := p.NoLossReason(); why != "" {
		row("Loss", fmt.Sprintf("none: %s; estimated %.0f GPU-s before", why, p.EstimatedLossGPUSeconds))
	} else {
		row("Loss", fmt.Sprintf("%s GPU-s = %s × (lost %s + save/restore %s + recompute %s) s; estimated %.0f",
			floatOrDash(p.EffectiveLossGPUSeconds), gpuEquivalents(p.GPUs), floatOrDash(p.LostSeconds), floatOrDash(p.SaveRestoreSeconds),
			floatOrDash(p.RecomputeSeconds), p.EstimatedLossGPUSeconds))
	}
	for _, f := range p.Failures {
		row("Failure", f)
	}
	if p.Detail != "" {
		row("Detail", p.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printCandidates(w, p.Candidates)
}

// victimGPUs says what the victim's allocation held: "2 GPU(s)" for whole
// GPUs, or "810 milli-GPU (0.81 GPU) of 1 GPU" for a share. p.GPUs is the
// allocation's milli-GPUs summed over its GPUs / 1000 (GPU equivalents, the
// factor of the loss in GPU-seconds), not a count of GPUs; the count of GPUs
// it sat on comes from the victim's candidate entry when the plan kept one.
func victimGPUs(p *api.Preemption) string {
	if p.GPUs == math.Trunc(p.GPUs) {
		return gpuEquivalents(p.GPUs)
	}
	s := gpuEquivalents(p.GPUs)
	for _, c := range p.Candidates {
		if c.JobID == p.VictimJobID && c.GPUs > 0 {
			s += " of " + gpusText(float64(c.GPUs))
			break
		}
	}
	return s
}

// gpuEquivalents renders an allocation's size in GPU equivalents with its
// unit: "2 GPU(s)" when whole, "810 milli-GPU (0.81 GPU)" for a share.
func gpuEquivalents(g float64) string {
	if g == math.Trunc(g) {
		return fmt.Sprintf("%g GPU(s)", g)
	}
	return fmt.Sprintf("%d milli-GPU (%g GPU)", int64(math.Round(g*1000)), g)
}

// reachedText is when the victim's next run got back to the step its run
// had reached when it stopped on the notice (store step_at_notice, reported
// by the run itself; the recompute target), and that step. It is not the
// checkpoint at the notice (an older step), printed on its own row.
func reachedText(p *api.Preemption) string {
	s := timeOrDash(p.PassedAt)
	if p.StepAtNotice != nil {
		s += fmt.Sprintf(" (step %d, reached by the run when it stopped)", *p.StepAtNotice)
	}
	return s
}

// victimOutcome says how the victim's job ended after the resume and
// whether its output was affected, or that it has not ended.
func victimOutcome(p *api.Preemption) string {
	if p.FinalState == "" {
		if why := p.NoLossReason(); why != "" && p.ReleasedAt == nil {
			return "- (" + why + ")"
		}
		if p.ReleasedAt == nil {
			return "- (nothing was released)"
		}
		return "- (the job has not ended)"
	}
	failures := "-"
	if p.FailuresSinceResume != nil {
		failures = strconv.Itoa(*p.FailuresSinceResume)
	}
	return fmt.Sprintf("%s at %s, %s failure(s) since the resume; output affected: %s (%s)", p.FinalState,
		timeOrDash(p.FinalAt), failures, boolOrDash(p.OutputAffected), p.OutputNote)
}

// printCandidates writes the running jobs the plan weighed, one per line.
func printCandidates(w io.Writer, cs []api.PreemptionCandidate) error {
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "Candidates: none recorded")
		return err
	}
	fmt.Fprintln(w, "Candidates (low-risk queues first, then least expected loss):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tQUEUE\tLOW RISK\tGPUS\tEST LOSS (GPU-s)\tCHOSEN\tWHY NOT")
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.0f\t%s\t%s\n", c.JobID, c.Queue, yesNo(c.LowRisk), c.GPUs,
			c.EstimatedLossGPUSeconds, yesNo(c.Chosen), dash(c.Gate))
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

// savedText says whether the victim saved a checkpoint after the notice and
// which checkpoint its next run must resume from.
func savedText(p *api.Preemption) string {
	if p.SavedAt == nil && p.SavedCheckpoint != nil {
		cp := p.SavedCheckpoint
		return fmt.Sprintf("no new checkpoint; resumes from checkpoint step %d (%s)", cp.Step, cp.Location)
	}
	return timeOrDash(p.SavedAt) + checkpointText(p.SavedCheckpoint)
}

func checkpointText(cp *api.Checkpoint) string {
	if cp == nil {
		return ""
	}
	return fmt.Sprintf(" (checkpoint step %d, %s)", cp.Step, cp.Location)
}
