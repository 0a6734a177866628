package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/vocab"
)

func init() {
	cmd := &cobra.Command{
		Use:   "why JOB-ID",
		Short: "Explain in plain words why a job is waiting (or where it runs)",
		Long: `why explains a job's current state from the last scheduling cycle: how long it
has waited and since when (submit time, start of the wait, start of the current
reason), the wait reason with its quantities, its rank in its pool, its
effective priority by parts (tier + aging + fair share), what would change the
reason, the expected next re-evaluation (the next timer cycle, the time aging
lifts its rank above the job ahead, or an estimated release from running jobs'
declared run times), whether aging can ever lift it above the job ahead (with
the numbers when it cannot), the last scheduling action for the job with the
policy version its cycle ran with (gpugov policy show HASH), and the next
action the reason implies.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, "")
		if err != nil {
			return err
		}
		job, err := client.GetJob(cmd.Context(), args[0])
		if err != nil {
			return apiFailure(err)
		}
		_, err = io.WriteString(cmd.OutOrStdout(), explainJob(job))
		return err
	}
	rootCmd.AddCommand(cmd)
}

// explainJob renders the explanation, one statement per line; the first line
// is the summary, e.g. "j-… waiting 14m (since 13:02) — capacity_busy: needs
// …; rank 3 in pool a100-east; priority 20,450 = tier key-project 20,000 +
// aging 300 + fair share 150; next re-evaluation: when …".
func explainJob(j *api.Job) string {
	var b strings.Builder
	switch j.State {
	case vocab.JobSubmitted, vocab.JobWaiting:
		explainWait(&b, j)
	case vocab.JobPlaced, vocab.JobRunning:
		fmt.Fprintf(&b, "%s is %s, not waiting", j.ID, j.State)
		if e := j.Explanation; e != nil && e.Placed != nil {
			fmt.Fprintf(&b, " — placed on %s at rank %d; priority %s", describePlacement(e.Placed), e.Rank,
				describePriority(j.Tier, e.Priority))
		}
		b.WriteString("\n")
		if d := describeLastDecision(j.LastDecision); d != "" {
			fmt.Fprintf(&b, "last scheduling action: %s\n", d)
		}
	default:
		fmt.Fprintf(&b, "%s is %s (final); it no longer waits\n", j.ID, j.State)
		if r := j.LastRun; r != nil {
			fmt.Fprintf(&b, "last run: %s\n", describeRun(r))
		}
	}
	if j.CancelRequested {
		b.WriteString("cancellation requested: the job workflow is stopping the run\n")
	}
	return b.String()
}

// explainWait writes the summary line of a pending job and its follow-ups.
func explainWait(b *strings.Builder, j *api.Job) {
	now := clientNow()
	since := j.SubmittedAt
	if j.WaitingSince != nil {
		since = *j.WaitingSince
	}
	fmt.Fprintf(b, "%s waiting %s (since %s)", j.ID, formatDuration(now.Sub(since)), formatClock(since))
	w, e := j.Wait, j.Explanation
	if w == nil {
		b.WriteString(" — not yet evaluated by a scheduling cycle; the scheduler looks at it on its next cycle\n")
		return
	}
	fmt.Fprintf(b, " — %s", w.Reason)
	if w.Since.Sub(since) >= time.Minute { // the reason changed during the wait: say since when this one holds
		fmt.Fprintf(b, " for %s (since %s)", formatDuration(now.Sub(w.Since)), formatClock(w.Since))
	}
	if w.Detail != "" {
		fmt.Fprintf(b, ": %s", w.Detail)
	}
	if e != nil {
		fmt.Fprintf(b, "; rank %d in pool %s; priority %s", e.Rank, e.Pool, describePriority(j.Tier, e.Priority))
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "submitted: %s (%s ago); waiting since %s; %s since %s (%s)\n", formatClock(j.SubmittedAt),
		formatDuration(now.Sub(j.SubmittedAt)), formatClock(since), w.Reason, formatClock(w.Since), formatDuration(now.Sub(w.Since)))
	if w.ReEvaluate != "" {
		fmt.Fprintf(b, "what would change it: %s\n", w.ReEvaluate)
	}
	if e != nil {
		if n := describeNextEvaluation(e); n != "" {
			fmt.Fprintf(b, "next re-evaluation: %s\n", n)
		}
		if o := describeOvertake(e.Overtake); o != "" {
			fmt.Fprintf(b, "aging: %s\n", o)
		}
	}
	if d := describeLastDecision(j.LastDecision); d != "" {
		fmt.Fprintf(b, "last scheduling action: %s\n", d)
	}
	if w.BlockingJobID != "" {
		fmt.Fprintf(b, "blocked by: %s\n", w.BlockingJobID)
	}
	if e != nil {
		for _, s := range e.Suggestions {
			fmt.Fprintf(b, "would change it: %s (amend %s: %s)\n", s.Text, s.Field, suggestionValue(s))
		}
		for _, r := range e.Releases {
			fmt.Fprintf(b, "expected release: %s\n", describeRelease(r, now))
		}
	}
	if w.NextAction != "" {
		fmt.Fprintf(b, "next action: %s\n", w.NextAction)
	}
	if cmd := actionCommand(j, vocab.WaitReason(w.Reason)); cmd != "" {
		fmt.Fprintf(b, "to act: %s\n", cmd)
	}
	if j.Held {
		fmt.Fprintf(b, "held: it waits until its owner or an operator releases it (POST /v1/jobs/%s/release)\n", j.ID)
	}
}

// actionCommand is the gpugov command that takes the next action of reason,
// for the reasons whose action has a route (docs/design.md §3, "Act on a
// wait"), or "".
func actionCommand(j *api.Job, reason vocab.WaitReason) string {
	switch reason {
	case vocab.ReasonEnvironmentNotReady:
		var cmds []string
		for _, p := range j.Prerequisites {
			if !p.Ready {
				cmds = append(cmds, fmt.Sprintf("gpugov prereq %s %s --ready -m MESSAGE", j.ID, p.Name))
			}
		}
		return strings.Join(cmds, "; ")
	case vocab.ReasonQuotaExhausted:
		return fmt.Sprintf("gpugov quota request %s %s --nominal-milli N --reason TEXT (an admin approves it; gpugov quota list --pool %s shows who uses the pool's quota)",
			j.Resources.Pool, j.Project, j.Resources.Pool)
	case vocab.ReasonNoMatchingCapacity, vocab.ReasonFragmented:
		return fmt.Sprintf("gpugov amend %s -f resources.yaml (with a request the pool's nodes can hold; GET /v1/inventory lists them)", j.ID)
	}
	return ""
}

// describeNextEvaluation renders the explanation's next re-evaluation,
// e.g. "12:05 (in 5s), the next timer cycle", or "" when none is known.
// An instant already past is never printed as the next one: it is "at the
// next cycle", which is then due.
func describeNextEvaluation(e *api.Explanation) string {
	n := e.NextEvaluation
	if n == nil {
		return ""
	}
	now := clientNow()
	left := n.At.Sub(now)
	if left < time.Second {
		// The instant lies in the past because the explanation is older
		// than it: a waiting job's explanation is rewritten only when it
		// changes or is 30–60 s old (deeper in its pool, up to 10 min;
		// docs/design.md §1 "The why record"), while every cycle in
		// between evaluates the job. Its timer instant was its writing
		// cycle's plus the timer's period, which the later cycles have
		// passed; the next cycle is due.
		due := "at the next cycle"
		if vocab.NextEvalKind(n.Kind) == vocab.NextEvalTimer && e.EvaluatedAt != nil && n.At.After(*e.EvaluatedAt) {
			due += fmt.Sprintf(", within %s (the timer runs one at least that often)", formatDuration(n.At.Sub(*e.EvaluatedAt)))
		}
		if e.EvaluatedAt != nil && now.Sub(*e.EvaluatedAt) >= time.Second {
			due += fmt.Sprintf("; this explanation is %s old, and an unchanged one is rewritten only every 30–60 s", formatDuration(now.Sub(*e.EvaluatedAt)))
		}
		return due
	}
	when := fmt.Sprintf("%s (in %s)", formatClock(n.At), formatDuration(left))
	switch vocab.NextEvalKind(n.Kind) {
	case vocab.NextEvalTimer:
		return when + ", the next timer cycle; nothing known changes the outcome before it"
	case vocab.NextEvalAgingOvertake:
		ahead := ""
		if o := e.Overtake; o != nil {
			ahead = " " + o.AheadJobID
		}
		return when + ", when aging lifts its rank above job" + ahead
	case vocab.NextEvalReleaseEstimate:
		return "≈ " + when + ", estimate: a running job's declared run time ends then, freeing GPUs it could use"
	}
	return when + ", " + n.Kind
}

// describeOvertake says whether aging can lift the job above the job ahead:
// "" when it can (the next re-evaluation dates it) or nothing is known, and
// "never lifts it above job X: …" with the numbers when it cannot.
func describeOvertake(o *api.Overtake) string {
	if o == nil || !o.Never {
		return ""
	}
	return fmt.Sprintf("never lifts it above job %s: %s points ahead; this job's credit can still grow %s (bound %s), "+
		"job %s's %s — waiting alone will not reorder them", o.AheadJobID, formatPoints(o.GapPoints),
		formatPoints(o.HeadroomPoints), formatPoints(o.BoundPoints), o.AheadJobID, formatPoints(o.AheadHeadroomPoints))
}

// describeLastDecision renders the last scheduling action, e.g. "12:04
// (cycle c-…): evaluated and left waiting (capacity_busy), rank 3 in its
// pool; the same since 11:50", or "" when there is none.
func describeLastDecision(d *api.LastDecision) string {
	if d == nil {
		return ""
	}
	var what string
	switch vocab.SchedulingAction(d.Action) {
	case vocab.ActionPlaced:
		what = "placed"
	case vocab.ActionPlacementRefused:
		what = "planned a placement, refused when applied: " + d.Detail
	case vocab.ActionPreemptionStarted:
		what = "started preemption of " + strings.Join(d.Victims, ", ") + ": " + d.Detail
	case vocab.ActionPreemptionProposed:
		what = "proposed preemption of " + strings.Join(d.Victims, ", ") + " (not carried out): " + d.Detail
	case vocab.ActionHeldByReservation:
		what = "held back by a reservation for job " + d.JobID
	case vocab.ActionLeftWaiting:
		what = "evaluated and left waiting (" + d.Reason + ")"
	case vocab.ActionSkipped:
		what = "skipped as not ready (" + d.Reason + ")"
	default:
		what = d.Action
	}
	cycle := "cycle " + d.CycleID
	if d.Policy != "" {
		cycle += ", policy " + shortHash(d.Policy) // the version that decided: gpugov policy show HASH
	}
	out := fmt.Sprintf("%s (%s): %s", formatClock(d.At), cycle, what)
	if d.Rank > 0 {
		out += fmt.Sprintf(", rank %d in its pool", d.Rank)
	}
	if d.Since.Before(d.At) {
		out += "; the same since " + formatClock(d.Since)
	}
	return out
}

// suggestionValue is a suggestion's value as a resources file writes it.
func suggestionValue(s api.Suggestion) string {
	switch {
	case s.Field == "gpu_models":
		return "[" + strings.ReplaceAll(s.Value, ",", ", ") + "]"
	case s.Field == "node_selector" && s.Value == "":
		return "none"
	case s.Field == "node_selector":
		return "{" + strings.ReplaceAll(strings.ReplaceAll(s.Value, "=", ": "), ",", ", ") + "}"
	}
	return s.Value
}

// describeRelease renders an expected release, marked as the estimate it
// is: "job j-1 frees 2000 milli-GPU, expected end ~14:20 (declared run time)".
func describeRelease(r api.ExpectedRelease, now time.Time) string {
	note := "declared run time"
	if r.ExpectedEnd.Before(now) {
		note += "; overdue"
	}
	return fmt.Sprintf("job %s frees %d milli-GPU, expected end ~%s (%s)", r.JobID, r.Milli, formatClock(r.ExpectedEnd), note)
}
