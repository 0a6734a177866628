package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/plural"
)

// displayLocation is the zone times are shown in; tests pin it.
var displayLocation = time.Local

// clientNow is the clock the client commands measure waits with; tests pin it.
var clientNow = time.Now

func init() {
	var format string
	var list apiclient.ListOptions
	cmd := &cobra.Command{
		Use:   "get [JOB-ID]",
		Short: "Show one job (its state, wait reason and rank), or list jobs",
		Long: `get shows one job: state, resources, current wait reason with its detail and
since when, rank and effective priority. Without a job ID it lists one page of
jobs (a submitter token sees only its project's jobs); --cursor pages on.`,
		Args: cobra.MaximumNArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&format, "format", "table", "output: table or json")
	f.StringVar(&list.Project, "project", "", "list: only this project")
	f.StringVar(&list.Queue, "queue", "", "list: only this queue")
	f.StringVar(&list.State, "state", "", "list: only this state")
	f.StringVar(&list.Reason, "reason", "", "list: only this wait reason")
	f.IntVar(&list.Limit, "limit", 0, "list: page size, 1..1000 (server default 100)")
	f.StringVar(&list.Cursor, "cursor", "", "list: the next-page cursor printed by the previous page")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkLimit(cmd.Flags(), list.Limit); err != nil {
			return err
		}
		client, err := connect(newClient, format, "table", "json")
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if len(args) == 0 {
			page, err := client.ListJobs(cmd.Context(), list)
			if err != nil {
				return apiFailure(err)
			}
			if format == "json" {
				return printJSON(out, page)
			}
			return printJobList(out, page)
		}
		job, err := client.GetJob(cmd.Context(), args[0])
		if err != nil {
			return apiFailure(err)
		}
		if format == "json" {
			return printJSON(out, job)
		}
		return printJob(out, job)
	}
	rootCmd.AddCommand(cmd)
}

// printJob writes one job as aligned "FIELD  value" rows.
func printJob(w io.Writer, j *api.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("ID", j.ID)
	row("PROJECT", j.Project)
	row("QUEUE", fmt.Sprintf("%s (tier %s)", j.Queue, j.Tier))
	row("STATE", stateText(j))
	row("RESOURCES", describeResources(j.Resources))
	if len(j.Command) > 0 {
		row("COMMAND", strings.Join(j.Command, " "))
	} else {
		row("RUN", fmt.Sprintf("simulated, %s", formatLength(time.Duration(j.RunSeconds*float64(time.Second)))))
	}
	row("RECOVERY", describeRecovery(j.Recovery))
	row("SUBMITTED", formatTime(j.SubmittedAt))
	if j.StartedAt != nil {
		row("STARTED", fmt.Sprintf("%s (waited %s)", formatTime(*j.StartedAt), formatDuration(j.StartedAt.Sub(j.SubmittedAt))))
	}
	if j.EndedAt != nil {
		row("ENDED", formatTime(*j.EndedAt))
	}
	if r := j.LastRun; r != nil {
		row("LAST RUN", describeRun(r))
	}
	if w := j.Wait; w != nil {
		row("WAIT", fmt.Sprintf("%s for %s (since %s)", w.Reason, formatDuration(clientNow().Sub(w.Since)), formatClock(w.Since)))
		row("DETAIL", w.Detail)
		row("NEXT ACTION", w.NextAction)
		row("RE-EVALUATE", w.ReEvaluate)
		row("BLOCKED BY", w.BlockingJobID)
	}
	if e := j.Explanation; e != nil {
		if j.State.Pending() { // a rank orders waiting jobs only; running and final jobs have none
			row("RANK", fmt.Sprintf("%d in pool %s", e.Rank, e.Pool))
		}
		row("PRIORITY", describePriority(j.Tier, e.Priority))
		if p := e.Placed; p != nil {
			row("PLACED ON", describePlacement(p))
		}
		if j.State.Pending() {
			row("NEXT EVAL", describeNextEvaluation(e))
			row("AGING", describeOvertake(e.Overtake))
			for _, sg := range e.Suggestions {
				row("WOULD FIT", sg.Text)
			}
			for _, r := range e.Releases {
				row("RELEASE", describeRelease(r, clientNow()))
			}
		}
	}
	row("LAST ACTION", describeLastDecision(j.LastDecision))
	row("NOTE", j.Note)
	return tw.Flush()
}

// printJobList writes a page of jobs as a table, then the next-page cursor.
func printJobList(w io.Writer, page *api.JobList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECT\tQUEUE\tSTATE\tREASON\tGPUS\tPOOL\tSUBMITTED")
	for _, j := range page.Jobs {
		reason := "-"
		if j.Explanation != nil && j.Explanation.Reason != "" && j.State.Pending() {
			reason = j.Explanation.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Project, j.Queue, j.State, reason,
			gpuCount(j.Resources), j.Resources.Pool, formatTime(j.SubmittedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		_, err := fmt.Fprintf(w, "more: --cursor %s\n", page.NextCursor)
		return err
	}
	return nil
}

// stateText is the state plus the flags that change its meaning.
func stateText(j *api.Job) string {
	s := string(j.State)
	if j.Held {
		s += ", held"
	}
	if j.CancelRequested {
		s += ", cancel requested"
	}
	if j.Protected {
		s += ", protected"
	}
	return s
}

// gpuCount is "2" for whole GPUs or "0.25" for a share.
func gpuCount(r api.ResourceSpec) string {
	if r.GPUs == 1 && r.GPUMilli > 0 && r.GPUMilli < 1000 {
		return fmt.Sprintf("%.3g", float64(r.GPUMilli)/1000)
	}
	return fmt.Sprint(r.GPUs)
}

// describeResources renders a request as "4 GPUs × ≥81920 MiB (A100|H100), pool x, same-node".
func describeResources(r api.ResourceSpec) string {
	var b strings.Builder
	switch {
	case r.GPUs == 1 && r.GPUMilli > 0 && r.GPUMilli < 1000:
		fmt.Fprintf(&b, "%d milli-GPU of 1 GPU", r.GPUMilli)
	default:
		b.WriteString(plural.Count(r.GPUs, "GPU", "GPUs")) // "16 GPUs", not "16 GPU"
	}
	if r.GPUMemoryMiB > 0 {
		fmt.Fprintf(&b, " × ≥%d MiB", r.GPUMemoryMiB)
	}
	if len(r.GPUModels) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.GPUModels, "|"))
	}
	fmt.Fprintf(&b, ", pool %s", r.Pool)
	if r.Topology != "" && r.Topology != "any" {
		fmt.Fprintf(&b, ", %s", r.Topology)
	}
	if r.CPUMilli > 0 || r.MemoryMiB > 0 {
		fmt.Fprintf(&b, ", %d milli-CPU, %d MiB host memory", r.CPUMilli, r.MemoryMiB)
	}
	return b.String()
}

// describeRecovery summarises the recovery evidence.
func describeRecovery(r api.Recovery) string {
	if !r.Checkpointable {
		return "not checkpointable"
	}
	s := "checkpointable"
	if r.CheckpointIntervalSeconds > 0 {
		s += fmt.Sprintf(" every %s", formatLength(time.Duration(r.CheckpointIntervalSeconds)*time.Second))
	}
	if c := r.LastCheckpoint; c != nil {
		s += fmt.Sprintf(", last checkpoint step %d at %s", c.Step, formatTime(c.At))
	}
	return s + ", " + plural.Count(r.VerifiedResumes, "verified resume", "verified resumes")
}

// describePriority renders the score by parts, e.g. "20,450 = tier
// key-project 20,000 + aging 300 + fair share 150", and the min-share boost
// that served the job ahead of its score, when it had one.
func describePriority(tier string, p api.Priority) string {
	aging := "aging " + formatPoints(p.AgingCredit)
	if p.AgingCapped {
		aging += " (at its cap)"
	}
	s := fmt.Sprintf("%s = tier %s %s + %s + fair share %s", formatPoints(p.Score), tier,
		formatPoints(p.TierBase), aging, formatPoints(p.FairShare))
	if p.MinShareBoost != "" {
		s += "; served before queues at or above their min_share (not before production): " + p.MinShareBoost
	}
	return s
}

// describePlacement renders where the job was placed.
func describePlacement(p *api.PlacedOn) string {
	gpus := make([]string, len(p.GPUs))
	for i, g := range p.GPUs {
		gpus[i] = g.UUID
		if g.Milli < 1000 {
			gpus[i] += fmt.Sprintf(" (%d milli)", g.Milli)
		}
	}
	s := fmt.Sprintf("%s/%s: %s", p.Pool, p.Node, strings.Join(gpus, ", "))
	if p.Borrowed {
		s += " (borrowed quota)"
	}
	return s
}

// formatPoints rounds priority points to an integer with thousands separators.
func formatPoints(f float64) string {
	n := int64(math.Round(f))
	neg := n < 0
	if neg {
		n = -n
	}
	digits := fmt.Sprint(n)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatLength renders a declared length (a run's, a checkpoint interval)
// in formatDuration's units but keeps the seconds under an hour: 1m40s for
// 100 s, where formatDuration's 1m would drop 40 % of it; 14m when whole.
func formatLength(d time.Duration) string {
	if d >= time.Minute && d < time.Hour {
		if s := int(d.Seconds()) % 60; s != 0 {
			return fmt.Sprintf("%dm%02ds", int(d.Minutes()), s)
		}
	}
	return formatDuration(d)
}

// formatDuration renders an elapsed time coarsely: 45s, 14m, 2h05m, 3d04h.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// formatClock is "15:04" for today and "2006-01-02 15:04" otherwise, in displayLocation.
func formatClock(t time.Time) string {
	t, now := t.In(displayLocation), clientNow().In(displayLocation)
	if t.Year() == now.Year() && t.YearDay() == now.YearDay() {
		return t.Format("15:04")
	}
	return t.Format("2006-01-02 15:04")
}

// formatTime is a full timestamp in displayLocation.
func formatTime(t time.Time) string {
	return t.In(displayLocation).Format("2006-01-02 15:04:05 MST")
}

// describeRun is one line on a run: number, ID, and how it ended and why.
func describeRun(r *api.Run) string {
	out := fmt.Sprintf("#%d %s", r.Number, r.ID)
	switch {
	case r.EndedAt == nil:
		out += fmt.Sprintf(", running since %s", formatClock(r.StartedAt))
	default:
		out += fmt.Sprintf(", %s at %s", r.Outcome, formatClock(*r.EndedAt))
	}
	if r.Detail != "" {
		out += ": " + r.Detail
	}
	return out
}
