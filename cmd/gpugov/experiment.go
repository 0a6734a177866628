package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds `gpugov experiment …`, the client side of policy
// experiments (docs/design.md §4 "Experiments"): create one from a YAML file,
// list them, show one's timeline and comparison, promote a kept candidate or
// abort.

func init() {
	cmd := &cobra.Command{
		Use:   "experiment",
		Short: "Policy experiments: create, list, show, promote, abort",
		Long: `experiment runs a policy change as an experiment: one variable group per
round, a baseline measured on the queue report's definitions, an observation
window with rollback conditions checked during it, and a verdict (kept,
rolled_back, not_met, inconclusive). The ExperimentWorkflow does the switching;
a kept candidate stays in force until an admin promotes it (the new baseline)
or aborts (the baseline is restored). Example: deploy/gpugov/experiment-aging.yaml.`,
		// Runnable, so that an unknown subcommand is a usage error (exit 2)
		// rather than help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(experimentCreateCmd(), experimentListCmd(), experimentShowCmd(),
		experimentDecideCmd(api.ActionPromote), experimentDecideCmd(api.ActionAbort))
	rootCmd.AddCommand(cmd)
}

const experimentExitCodes = `
Exit codes: 0 done, 2 bad arguments, a file that does not parse ("file:line:
field: what is wrong") or a request the API refused (every field named), 1
server or network failure.`

// experimentFailure maps an API error as apiFailure does, listing every
// field error of a 400 (an experiment spec can have several), one a line.
func experimentFailure(err error) error {
	e, ok := apiclient.AsError(err)
	if !ok || !e.ClientError() || len(e.Body.Details) < 2 {
		return apiFailure(err)
	}
	lines := make([]string, len(e.Body.Details))
	for i, d := range e.Body.Details {
		lines[i] = d.Field + ": " + d.Message
	}
	return newUsageError("the API refused the experiment (%s):\n%s", plural.Count(len(lines), "problem", "problems"), strings.Join(lines, "\n"))
}

// readExperimentFile parses an experiment file (experiment.ParseSpecFile:
// YAML with the API's field names, candidate.file read relative to it into
// candidate.policy). Every problem is a usage error.
func readExperimentFile(path string) (*experiment.Spec, error) {
	spec, err := experiment.ParseSpecFile(path)
	if err != nil {
		return nil, newUsageError("experiment create: %w", err)
	}
	return spec, nil
}

// experimentCreateCmd is `gpugov experiment create -f FILE` (admin).
func experimentCreateCmd() *cobra.Command {
	var file, format string
	cmd := &cobra.Command{
		Use:   "create -f EXPERIMENT.yaml",
		Short: "Create a policy experiment from a YAML file (admin)",
		Long: `create reads an experiment file (YAML, the field names of POST /v1/experiments;
candidate.file is a policy file relative to it, read here and sent as
candidate.policy) and posts it. The API validates it (metrics, targets, a
window of at least one scheduling cycle), loads the candidate, takes the active
policy version as the baseline and refuses a candidate that differs from it in
more than one variable group unless override.reason is given. It prints the
experiment's ID alone on stdout (a summary line goes to stderr), so that
ID=$(gpugov experiment create -f FILE) works; the ExperimentWorkflow then measures the baseline, switches
the policy in force to the candidate at the start and checks the rollback
conditions during the window. The policy in force is service-wide: the
candidate governs every pool, and the scope's pools are what is measured and
what the experiment holds. So experiments run one at a time: while one holds
its pools, creating another (in any pool) is refused naming it.` + experimentExitCodes,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&file, "file", "f", "", "experiment file (YAML; required)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if file == "" {
			return newUsageError("experiment create: -f EXPERIMENT.yaml is required")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		spec, err := readExperimentFile(file)
		if err != nil {
			return err
		}
		e, err := client.CreateExperiment(cmd.Context(), spec)
		if err != nil {
			return experimentFailure(err)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), e)
		}
		if _, err := fmt.Fprintln(cmd.OutOrStdout(), e.ID); err != nil {
			return err
		}
		_, err = fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s in pool %s; candidate %s vs baseline %s (%s); workflow %s; follow it with `gpugov experiment show %s`\n",
			e.ID, e.Name, strings.Join(e.Spec.Scope.Pools, ", "), shortHash(e.CandidateHash), shortHash(e.BaselineHash),
			groupList(e), e.WorkflowID, e.ID)
		return err
	}
	return cmd
}

// groupList renders an experiment's variable groups, e.g. "aging".
func groupList(e *api.Experiment) string {
	if len(e.Groups) == 0 {
		return "no group"
	}
	parts := make([]string, len(e.Groups))
	for i, g := range e.Groups {
		parts[i] = string(g)
	}
	return strings.Join(parts, ", ")
}

// experimentListCmd is `gpugov experiment list` (operator, admin).
func experimentListCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List policy experiments, newest first (operator or admin)",
		Long:  `list shows every experiment, newest first: its state, verdict, pools, the variable groups it changes and when it started.` + experimentExitCodes,
		Args:  cobra.NoArgs,
	}
	l := addListFlags(cmd, &limit)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := l.client()
		if err != nil {
			return err
		}
		list, err := client.Experiments(cmd.Context(), limit)
		return show(cmd, l, list, err, writeExperimentList)
	}
	return cmd
}

// writeExperimentList prints experiments as a table.
func writeExperimentList(w io.Writer, list *api.ExperimentList) error {
	if len(list.Experiments) == 0 {
		_, err := io.WriteString(w, "no experiments\n")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tVERDICT\tPOOLS\tGROUPS\tSTART\tWINDOW\tBY")
	for i := range list.Experiments {
		e := &list.Experiments[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Name, e.State, dash(string(e.Verdict)),
			strings.Join(e.Spec.Scope.Pools, ","), groupList(e), formatTime(e.StartAt),
			seconds(e.Spec.WindowSeconds), e.CreatedBy)
	}
	return tw.Flush()
}

// seconds renders a duration in seconds as Go does ("4h0m0s").
func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

// experimentShowCmd is `gpugov experiment show ID` (operator, admin).
func experimentShowCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show an experiment: its timeline, then the comparison and the verdict",
		Long: `show prints an experiment: what it tries (the candidate against the baseline,
the variable groups, the scope, the window, the expected result), its
timeline (created, baseline measured, switched, each rollback check with its
values, a rollback or the verdict, promoted or aborted), then, once decided,
the comparison table on the queue report's definitions plus the governance
metrics.` + experimentExitCodes,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		d, err := client.Experiment(cmd.Context(), args[0])
		return showResult(cmd, format, d, err, writeExperiment)
	}
	return cmd
}

// writeExperiment prints an experiment's header, its timeline and its
// outcome (experiment.Outcome.WriteText).
func writeExperiment(w io.Writer, d *api.ExperimentDetail) error {
	e := &d.Experiment
	state := string(e.State)
	if e.Verdict != "" {
		state += ", verdict " + string(e.Verdict)
	}
	if e.PromotedAt != nil {
		state += ", promoted " + formatTime(*e.PromotedAt)
	}
	fmt.Fprintf(w, "experiment %s: %s (%s)\n", e.ID, e.Name, state)
	if e.Spec.Hypothesis != "" {
		fmt.Fprintf(w, "hypothesis: %s\n", e.Spec.Hypothesis)
	}
	fmt.Fprintf(w, "candidate %s vs baseline %s, differing in %s\n", shortHash(e.CandidateHash), shortHash(e.BaselineHash), groupList(e))
	if e.Spec.Override != nil {
		fmt.Fprintf(w, "one-variable rule overridden by %s: %s\n", e.CreatedBy, e.Spec.Override.Reason)
	}
	queues := "every queue"
	if len(e.Spec.Scope.Queues) > 0 {
		queues = "queues " + strings.Join(e.Spec.Scope.Queues, ", ")
	}
	fmt.Fprintf(w, "scope: pool %s, watching %s; window %s from %s\n", strings.Join(e.Spec.Scope.Pools, ", "), queues,
		seconds(e.Spec.WindowSeconds), formatTime(e.StartAt))
	fmt.Fprintf(w, "expected: %s\n", describeExpectation(e.Spec.Expected))
	fmt.Fprintf(w, "workflow: %s\n", e.WorkflowID)

	fmt.Fprintln(w, "\ntimeline:")
	if len(d.Events) == 0 {
		fmt.Fprintln(w, "  (no event yet)")
	}
	for _, ev := range d.Events {
		results := checkResults(ev)
		fmt.Fprintf(w, "  %s  %-17s %s\n", formatTime(ev.At), ev.Kind, trimResults(ev.Detail, results))
		for _, r := range results {
			mark := "ok      "
			if r.Breached {
				mark = "BREACHED"
			}
			fmt.Fprintf(w, "      %s %s\n", mark, r.Text)
		}
	}
	if e.Outcome == nil {
		none := "no verdict yet"
		if e.State == vocab.ExperimentAborted {
			none = "aborted (no verdict)"
		}
		_, err := fmt.Fprintln(w, "\n"+none)
		return err
	}
	fmt.Fprintln(w)
	return e.Outcome.WriteText(w)
}

// checkResults returns the condition results a check or rollback event
// carries in its data (a []experiment.ConditionResult), or none.
func checkResults(ev api.ExperimentEvent) []experiment.ConditionResult {
	if len(ev.Data) == 0 || (ev.Kind != "check" && ev.Kind != "rolled_back") {
		return nil
	}
	var rs []experiment.ConditionResult
	if err := json.Unmarshal(ev.Data, &rs); err != nil {
		return nil
	}
	return rs
}

// trimResults drops from a check's detail its trailing list of the
// condition results ("…: A; BREACHED B", as the store writes it), which
// show prints one a line below it; any other detail is returned whole.
func trimResults(detail string, rs []experiment.ConditionResult) string {
	if len(rs) == 0 {
		return detail
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Text
		if r.Breached {
			parts[i] = "BREACHED " + r.Text
		}
	}
	if head, ok := strings.CutSuffix(detail, ": "+strings.Join(parts, "; ")); ok {
		return head
	}
	return detail
}

// describeExpectation renders the expected result, e.g. "longest_wait_s of
// tier experiment decrease by at least 30 %".
func describeExpectation(x experiment.Expectation) string {
	on := "the scope's total"
	switch {
	case x.Tier != "":
		on = "tier " + x.Tier
	case x.Queue != "":
		on = "queue " + x.Queue
	}
	return fmt.Sprintf("%s of %s: %s by at least %g %%", x.Metric, on, x.Direction, x.Change*100)
}

// experimentDecideCmd is `gpugov experiment promote|abort ID --reason TEXT`
// (admin).
func experimentDecideCmd(action string) *cobra.Command {
	short, long := "Promote a kept candidate to the new baseline (admin)",
		`promote makes a kept experiment's candidate the new baseline (admin token):
its version stays active and the promotion is recorded with who and why. Only
an experiment that finished with verdict kept can be promoted.`
	if action == api.ActionAbort {
		short, long = "Abort an experiment: the baseline is restored (admin)",
			`abort stops an experiment (admin token): its checks stop and, when the
candidate is in force (running, or finished kept and not promoted), the
baseline version is restored; the abort is recorded with who and why.`
	}
	var reason, format string
	cmd := &cobra.Command{
		Use:   action + " ID --reason TEXT",
		Short: short,
		Long:  long + experimentExitCodes,
		Args:  cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the experiment's record and the audit log (required)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if strings.TrimSpace(reason) == "" {
			return newUsageError("experiment %s: --reason is required", action)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		e, err := client.DecideExperiment(cmd.Context(), args[0], action, reason)
		return showResult(cmd, format, e, err, func(w io.Writer, e *api.Experiment) error {
			_, err := fmt.Fprintf(w, "%s sent to experiment %s (%s); its workflow records it: `gpugov experiment show %s`\n",
				action, e.ID, e.State, e.ID)
			return err
		})
	}
	return cmd
}
