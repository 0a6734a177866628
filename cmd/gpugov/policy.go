package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
)

// This file holds `gpugov policy …`, the client side of the live policy
// versions (docs/design.md §4): apply a policy file as the active version
// without a restart (admin), list the stored versions, show one, and diff
// two by variable group (operator, admin).

func init() {
	pol := &cobra.Command{
		Use:   "policy",
		Short: "Live policy versions: apply, list, show, diff",
		Long: `policy manages the stored policy versions. A version's body (its resolved
rules) is immutable and named by its SHA-256 (its hash); its lineage (derived
from, base) is that of its latest activation through the store. Exactly one
is active, and the scheduler runs its next cycle with it, without a
restart. apply
stores a policy file's version and activates it (admin, audited with your
reason); list, show and diff read the versions (operator or admin). A hash
may be given as a unique prefix of at least 8 hex digits.

A version applied here lasts across restarts on the same policy file; the
file's next edit supersedes it, so copy a lasting change into the file.

Example:
  gpugov policy apply policy.yaml --reason "raise the aging cap for long waits"
  gpugov policy list
  gpugov policy diff 48f6d3ed c6b1d932`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pol.AddCommand(policyApplyCmd(), policyListCmd(), policyShowCmd(), policyDiffCmd())
	rootCmd.AddCommand(pol)
}

const policyExitCodes = `

Exit codes: 0 done, 2 bad arguments, an unreadable file, or a request the API
refused (the field, or the file's line and field, is named), 1 server or
network failure.`

// policyApplyCmd is `gpugov policy apply FILE --reason TEXT` (admin).
func policyApplyCmd() *cobra.Command {
	var reason, override, format string
	var overrideReadiness bool
	cmd := &cobra.Command{
		Use:   "apply FILE --reason TEXT",
		Short: "Store a policy file's version and make it the active one (admin)",
		Long: `apply sends the policy file (gpugov.policy/v1, as serve --policy reads it) to
the API, which loads it with the same loader, stores its version and
activates it, derived from the active version and audited with your token's
name and the reason. The scheduler runs with everything it sets (queues,
quotas, pool stages, aging, fair share, ...) from its next cycle, without a
restart. It prints the new hash and what changed, by variable group; a file
the loader refuses prints every problem as "file:line: field: what is wrong"
and changes nothing. Applying the active version again changes nothing.
While a policy experiment holds a pool the API refuses (the experiment is
named): a new version would end it. --override-reason applies it anyway
(recorded in the audit log), ending the experiment at once (aborted,
policy_changed). A file that widens a
pool's automation stage (observe → trial → automate) is refused unless the
pool's readiness passes (gpugov pool readiness POOL); each failed check is
printed with its numbers. --override-readiness applies it anyway, audited
with --reason.

Example:
  gpugov policy apply deploy/gpugov/policy.yaml --reason "experiment queue capped at half the pool"` + policyExitCodes,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log (required)")
	cmd.Flags().StringVar(&override, "override-reason", "", "apply even though a policy experiment holds a pool (it ends the experiment); why, for the audit log")
	cmd.Flags().BoolVar(&overrideReadiness, "override-readiness", false,
		"widen pool stages even where the pool's readiness fails (admin's override, audited with --reason)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if reason == "" {
			return newUsageError("policy apply: --reason is required")
		}
		data, err := os.ReadFile(args[0])
		if err != nil {
			return newUsageError("policy apply: %w", err)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		res, err := client.ApplyPolicyWith(cmd.Context(), api.PolicyApply{Policy: string(data), File: args[0], Reason: reason,
			OverrideReason: override, OverrideReadiness: overrideReadiness})
		if err != nil {
			return policyFailure(err)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), res)
		}
		return writeApplied(cmd.OutOrStdout(), res)
	}
	return cmd
}

// policyFailure is apiFailure with the loader's problems one a line: each
// message already names the file, line and field.
func policyFailure(err error) error {
	e, ok := apiclient.AsError(err)
	if !ok || !e.ClientError() || !strings.HasPrefix(e.Body.Field, "policy") {
		return apiFailure(err)
	}
	msgs := []string{e.Body.Message}
	if len(e.Body.Details) > 0 {
		msgs = msgs[:0]
		for _, d := range e.Body.Details {
			msgs = append(msgs, d.Message)
		}
	}
	if e.Body.Code == api.CodeNotReady {
		return newUsageError("stage widening refused, the pool is not ready (--override-readiness applies it anyway):\n%s", strings.Join(msgs, "\n"))
	}
	return newUsageError("policy file refused:\n%s", strings.Join(msgs, "\n"))
}

// writeApplied prints what an apply did.
func writeApplied(w io.Writer, res *api.PolicyApplied) error {
	if !res.Changed {
		_, err := fmt.Fprintf(w, "policy %s is the active version already; nothing changed\n", shortHash(res.Hash))
		return err
	}
	if _, err := fmt.Fprintf(w, "applied policy %s (was %s); the scheduler runs with it from its next cycle\n",
		shortHash(res.Hash), shortHash(res.Previous)); err != nil {
		return err
	}
	for _, c := range res.Stages {
		outcome := string(c.Outcome)
		if outcome == "" {
			outcome = "restored"
		}
		fmt.Fprintf(w, "pool %s: stage %s → %s (%s)\n", c.Pool, c.From, c.To, outcome)
	}
	if res.Previous == "" {
		return nil
	}
	return writeGroupDiff(w, res.Diff)
}

// writeGroupDiff prints a diff by variable group: the group, then one
// field a line with its value before and after ("absent" where a side has
// none).
func writeGroupDiff(w io.Writer, d []policy.GroupDiff) error {
	if len(d) == 0 {
		_, err := io.WriteString(w, "no difference\n")
		return err
	}
	groups := make([]string, len(d))
	for i, g := range d {
		groups[i] = string(g.Group)
	}
	word := "groups differ"
	if len(d) == 1 {
		word = "group differs"
	}
	fmt.Fprintf(w, "%d variable %s: %s\n", len(d), word, strings.Join(groups, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, g := range d {
		fmt.Fprintf(tw, "%s:\n", g.Group)
		for _, ch := range g.Changes {
			fmt.Fprintf(tw, "  %s\t%s → %s\n", ch.Field, sideValue(ch.Before), sideValue(ch.After))
		}
	}
	return tw.Flush()
}

// sideValue is one side of a change as printed: the JSON value, "absent"
// for none.
func sideValue(v string) string {
	if v == "" {
		return "absent"
	}
	return v
}

// policyListCmd is `gpugov policy list [--limit N]`.
func policyListCmd() *cobra.Command {
	var limit int
	var format string
	cmd := &cobra.Command{
		Use:   "list [--limit N]",
		Short: "List the stored policy versions, newest first (operator, admin)",
		Long: `list shows the stored policy versions, newest first: the hash (12 digits),
when it was stored, whether it is the active one (*), DERIVED-FROM and BASE.
A version's body is immutable; its lineage is not: DERIVED-FROM is the version
that was active when this one was last activated through the store (an
apply, a quota change, an experiment's switch or rollback), and BASE the
policy file's version that chain started from. "-" for a file's own version,
which a file load or a switch back to it clears (docs/design.md §4 "Live
policy versions").

Example:
  gpugov policy list --limit 5` + policyExitCodes,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (1..1000; default the server's, 100)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Flags().Changed("limit") && (limit < 1 || limit > 1000) {
			return newUsageError("policy list: --limit %d: want 1..1000", limit)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		list, err := client.PolicyVersions(cmd.Context(), limit)
		return showResult(cmd, format, list, err, writePolicyList)
	}
	return cmd
}

// writePolicyList prints the versions as a table.
func writePolicyList(w io.Writer, list *api.PolicyVersionList) error {
	if len(list.Versions) == 0 {
		_, err := io.WriteString(w, "no policy versions stored (serve stores one at start)\n")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HASH\tACTIVE\tCREATED\tDERIVED-FROM\tBASE")
	for _, v := range list.Versions {
		active := ""
		if v.Active {
			active = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", shortHash(v.Hash), active, formatTime(v.CreatedAt), dashIfNone(v.DerivedFrom), dashIfNone(v.BaseHash))
	}
	return tw.Flush()
}

// dashIfNone is a short hash, or "-" for none.
func dashIfNone(h string) string {
	if h == "" {
		return "-"
	}
	return shortHash(h)
}

// policyShowCmd is `gpugov policy show HASH`.
func policyShowCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show HASH",
		Short: "Show one policy version: its lineage and its resolved rules (operator, admin)",
		Long: `show prints a policy version's hash, when it was stored, whether it is active,
its lineage, and its body: the resolved policy as canonical JSON (field
names as in the policy file, every default spelled out). HASH may be a
unique prefix of at least 8 hex digits, as list and why print them.

Example:
  gpugov policy show 48f6d3ed2df2` + policyExitCodes,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		v, err := client.PolicyVersion(cmd.Context(), args[0])
		return showResult(cmd, format, v, err, writePolicyVersion)
	}
	return cmd
}

// writePolicyVersion prints a version's metadata, then its body indented.
func writePolicyVersion(w io.Writer, v *api.PolicyVersionDetail) error {
	state := "inactive"
	if v.Active {
		state = "active"
	}
	fmt.Fprintf(w, "policy %s (%s), stored %s\n", v.Hash, state, formatTime(v.CreatedAt))
	if v.DerivedFrom != "" {
		fmt.Fprintf(w, "derived from %s; base (policy file version) %s\n", shortHash(v.DerivedFrom), dashIfNone(v.BaseHash))
	} else {
		fmt.Fprintln(w, "a policy file's version")
	}
	var body bytes.Buffer
	if err := json.Indent(&body, v.Policy, "", "  "); err != nil {
		return fmt.Errorf("policy %s: body: %w", v.Hash, err)
	}
	body.WriteByte('\n')
	_, err := body.WriteTo(w)
	return err
}

// policyDiffCmd is `gpugov policy diff A B`.
func policyDiffCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "What differs from version A to version B, by variable group (operator, admin)",
		Long: `diff compares two stored policy versions and prints what differs from A to B,
grouped by variable group (queue_service, quota, aging, fair_share, ordering,
preemption, reclaim, automation_stage, protection, notifications): each
field in the policy file's terms (aging.cap_points,
queues[experiment].max_share, quotas[team-a/a100].nominal_milli) with its
value in A and in B. A and B may be unique prefixes of at least 8 hex digits.

Example:
  gpugov policy diff 48f6d3ed c6b1d932 --format json` + policyExitCodes,
		Args: cobra.ExactArgs(2),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		d, err := client.PolicyDiff(cmd.Context(), args[0], args[1])
		return showResult(cmd, format, d, err, func(w io.Writer, d *api.PolicyDiff) error {
			if _, err := fmt.Fprintf(w, "policy %s → %s\n", shortHash(d.From), shortHash(d.To)); err != nil {
				return err
			}
			return writeGroupDiff(w, d.Diff)
		})
	}
	return cmd
}
