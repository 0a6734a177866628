package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
)

// This file holds the client commands of the action flows a wait reason
// implies (docs/design.md §3, "Act on a wait"): prereq (environment), amend
// (spec), and events, the job's wait history.

func init() {
	rootCmd.AddCommand(prereqCmd(), amendCmd(), eventsCmd())
}

// prereqCmd is `gpugov prereq JOB NAME --ready|--not-ready -m MSG`.
func prereqCmd() *cobra.Command {
	var ready, notReady bool
	var message, format string
	cmd := &cobra.Command{
		Use:   "prereq JOB-ID NAME --ready|--not-ready [-m MESSAGE]",
		Short: "Set a pending job's prerequisite ready or not ready",
		Long: `prereq sets the named prerequisite of a submitted or waiting job ready
(--ready) or not ready (--not-ready), with a message saying what was done or
what is missing. A job with a prerequisite not ready waits with reason
environment_not_ready; once every prerequisite is ready the scheduler, woken
by this call, evaluates the job on its next cycle. The job's project, an agent,
an operator or an admin may call it; it is audited with who, before and after.
Exit codes: 0 done, 2 bad arguments or a request the API refused (the field
is named), 1 server or network failure.`,
		Args: cobra.ExactArgs(2),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&ready, "ready", false, "the prerequisite is ready")
	cmd.Flags().BoolVar(&notReady, "not-ready", false, "the prerequisite is not ready")
	cmd.Flags().StringVarP(&message, "message", "m", "", "what was done, or what is missing")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the job)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if ready == notReady {
			return newUsageError("prereq: give exactly one of --ready and --not-ready")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		job, err := client.SetPrerequisite(cmd.Context(), args[0], args[1], ready, message)
		return showResult(cmd, format, job, err, func(w io.Writer, job *api.Job) error {
			_, err := io.WriteString(w, describePrerequisites(job, args[1]))
			return err
		})
	}
	return cmd
}

// describePrerequisites says what the named prerequisite is now and whether
// the job still waits for any, e.g. "j-…: prerequisite data is ready (staged)
// — every prerequisite is ready; the scheduler evaluates the job on its next
// cycle".
func describePrerequisites(j *api.Job, name string) string {
	var b strings.Builder
	var missing []string
	for _, p := range j.Prerequisites {
		if p.Name == name {
			fmt.Fprintf(&b, "%s: prerequisite %s is %s", j.ID, p.Name, readiness(p.Ready))
			if p.Message != "" {
				fmt.Fprintf(&b, " (%s)", p.Message)
			}
		}
		if !p.Ready {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) == 0 {
		b.WriteString(" — every prerequisite is ready; the scheduler evaluates the job on its next cycle\n")
	} else {
		fmt.Fprintf(&b, " — not ready: %s; the job waits with reason environment_not_ready\n", strings.Join(missing, ", "))
	}
	return b.String()
}

func readiness(ready bool) string {
	if ready {
		return "ready"
	}
	return "not ready"
}

// amendCmd is `gpugov amend JOB -f resources.yaml`.
func amendCmd() *cobra.Command {
	var file, reason, format string
	cmd := &cobra.Command{
		Use:   "amend JOB-ID -f RESOURCES.yaml",
		Short: "Replace a waiting job's resource request",
		Long: `amend replaces the resource request of a submitted or waiting job with the
resources object in the file (YAML or JSON; "-" reads standard input), the
same object as "resources:" of a job spec, e.g.

  gpus: 4
  gpu_memory_mib: 40960
  pool: a100-east
  topology: same-node

It is validated exactly like a submission; the pool cannot change. The job
keeps its submit time and the aging credit it has earned (see the README,
"Amending a request"). The job's project, an operator or an admin may call it;
it is audited with who, before and after.
Exit codes: 0 done, 2 bad arguments, a bad file or a request the API refused
(the field is named), 1 server or network failure.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&file, "file", "f", "", "resources file (YAML or JSON); - for standard input")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the job)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if file == "" {
			return newUsageError("amend: -f RESOURCES.yaml is required")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		res, err := readResources(cmd.InOrStdin(), file)
		if err != nil {
			return err
		}
		job, err := client.Amend(cmd.Context(), args[0], *res, reason)
		return showResult(cmd, format, job, err, func(w io.Writer, job *api.Job) error {
			fmt.Fprintf(w, "%s: resources now %s (submitted %s, kept)\n", job.ID,
				describeResources(job.Resources), formatClock(job.SubmittedAt))
			return nil
		})
	}
	return cmd
}

// readResources reads a YAML or JSON resources object from path ("-" is
// stdin) and decodes it with the API's own strict decoder
// (api.DecodeAmendRequest), so an unknown field or a wrong type is a usage
// error naming the field path (e.g. "resources.gpu_mili") as the API would.
func readResources(stdin io.Reader, path string) (*api.ResourceSpec, error) {
	body, err := readDocument(stdin, path, "amend", func(doc any) any { return map[string]any{"resources": doc} })
	if err != nil {
		return nil, err
	}
	req, apiErr := api.DecodeAmendRequest(bytes.NewReader(body))
	if apiErr != nil {
		return nil, newUsageError("amend: %s: %w", path, apiErr)
	}
	return req.Resources, nil
}

// eventsCmd is `gpugov events JOB`.
func eventsCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "events JOB-ID",
		Short: "Show a job's wait events: since, until, duration, reason, detail, next action",
		Long: `events lists the job's wait events, oldest first: one row per continuous wait
for one reason (however its quantities changed; the detail is the latest), with
when it started and ended ("now" for the current one), how long it lasted, the
reason, its detail and the next action the reason implies. Above the table: the
job's state, submit time and start of its wait, its rank in its pool, the
expected next re-evaluation and the last scheduling action.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "table", "json")
		if err != nil {
			return err
		}
		list, err := client.JobEvents(cmd.Context(), args[0])
		return showResult(cmd, format, list, err, printWaitEvents)
	}
	return cmd
}

// printWaitEvents writes the job's why record (state, submit, wait start,
// rank, next re-evaluation, last scheduling action) and the events as an
// aligned table, or says there are none.
func printWaitEvents(w io.Writer, l *api.WaitEventList) error {
	head := fmt.Sprintf("%s %s; submitted %s", l.JobID, l.State, formatClock(l.SubmittedAt))
	if l.WaitingSince != nil {
		head += fmt.Sprintf("; waiting since %s (%s)", formatClock(*l.WaitingSince), formatDuration(clientNow().Sub(*l.WaitingSince)))
	}
	if e := l.Explanation; e != nil && l.State.Pending() {
		head += fmt.Sprintf("; rank %d in pool %s", e.Rank, e.Pool)
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	if e := l.Explanation; e != nil && l.State.Pending() {
		if n := describeNextEvaluation(e); n != "" {
			fmt.Fprintf(w, "next re-evaluation: %s\n", n)
		}
		if o := describeOvertake(e.Overtake); o != "" {
			fmt.Fprintf(w, "aging: %s\n", o)
		}
	}
	if d := describeLastDecision(l.LastDecision); d != "" {
		fmt.Fprintf(w, "last scheduling action: %s\n", d)
	}
	if len(l.Events) == 0 {
		_, err := fmt.Fprintf(w, "%s has no wait events (no scheduling cycle has evaluated it while it waited)\n", l.JobID)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINCE\tUNTIL\tDURATION\tREASON\tDETAIL\tNEXT ACTION")
	for _, e := range l.Events {
		// The open event lasts until now by this client's clock, as in `why`.
		until, d := "now", clientNow().Sub(e.StartedAt)
		if e.EndedAt != nil {
			until, d = formatClock(*e.EndedAt), time.Duration(e.DurationSeconds*float64(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", formatClock(e.StartedAt), until, formatDuration(d),
			e.Reason, dash(e.Detail), dash(e.NextAction))
	}
	return tw.Flush()
}
