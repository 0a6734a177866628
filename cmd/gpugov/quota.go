package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds `gpugov quota …`, the client side of the quota action
// flow (docs/design.md §3 "Act on a wait", §4, §5): list the quotas with
// their use, set one (admin), ask for more, list the requests, approve or
// deny one (admin). Amounts are milli-GPU (1000 = one GPU).

func init() {
	quota := &cobra.Command{
		Use:   "quota",
		Short: "Project quotas per pool: list, set, request, approve, deny",
		Long: `quota shows and changes the project quotas of each pool (Kueue-style: a
nominal quota, and a borrowing limit up to which standard and experiment jobs
may use the pool's unused quota). A job beyond its project's quota waits with
reason quota_exhausted: raise the quota (quota set, admin), or ask for it
(quota request) and have an admin approve it. A quota change is a new policy
version derived from the active one; the scheduler plans with it at its next
cycle. Amounts are in milli-GPU (1000 = one GPU).`,
		// Runnable, so that an unknown subcommand is a usage error (exit 2)
		// rather than help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	quota.AddCommand(quotaListCmd(), quotaSetCmd(), quotaRequestCmd(), quotaRequestsCmd(),
		quotaDecideCmd(true), quotaDecideCmd(false))
	rootCmd.AddCommand(quota)
}

const quotaExitCodes = `
Exit codes: 0 done, 2 bad arguments or a request the API refused (the field
is named), 1 server or network failure.`

// quotaListCmd is `gpugov quota list [--pool POOL]`.
func quotaListCmd() *cobra.Command {
	var pool, format string
	cmd := &cobra.Command{
		Use:   "list [--pool POOL]",
		Short: "List the quotas with used, borrowed and lent out (milli-GPU)",
		Long: `list shows every project quota (of --pool) with what the scheduler charges
against it now: used by the project's running jobs, borrowed beyond its
nominal quota, and lent out — its share of what the pool's borrowers use out
of its unused nominal quota (split over the lenders in proportion to their
unused quota) — and to whom.` + quotaExitCodes,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&pool, "pool", "", "only this pool's quotas")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		list, err := client.Quotas(cmd.Context(), pool)
		return showResult(cmd, format, list, err, writeQuotaList)
	}
	return cmd
}

// writeQuotaList prints the ledger as a table, then the policy version.
func writeQuotaList(w io.Writer, list *api.QuotaList) error {
	if len(list.Quotas) == 0 {
		_, err := fmt.Fprintf(w, "no quotas (every project is unlimited); policy %s\n", shortHash(list.Policy))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tPROJECT\tNOMINAL\tBORROW-LIMIT\tUSED\tBORROWED\tLENT-OUT\tLENT-TO")
	for _, q := range list.Quotas {
		to := "-"
		if len(q.LentTo) > 0 {
			parts := make([]string, len(q.LentTo))
			for i, b := range q.LentTo {
				parts[i] = b.Project + " (borrows " + strconv.FormatInt(b.BorrowedMilli, 10) + ")"
			}
			to = strings.Join(parts, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Pool, q.Project, q.NominalMilli, q.BorrowingLimitMilli,
			q.UsedMilli, q.BorrowedMilli, q.LentOutMilli, to)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "milli-GPU (1000 = one GPU); policy %s\n", shortHash(list.Policy))
	return err
}

// shortHash is the first 12 digits of a policy hash, or "none".
func shortHash(h string) string {
	switch {
	case h == "":
		return "none"
	case len(h) > 12:
		return h[:12]
	}
	return h
}

// quotaSetCmd is `gpugov quota set POOL PROJECT --nominal-milli N
// --borrowing-limit-milli N --reason TEXT` (admin).
func quotaSetCmd() *cobra.Command {
	var nominal, borrow int64
	var reason, override, format string
	cmd := &cobra.Command{
		Use:   "set POOL PROJECT --nominal-milli N --borrowing-limit-milli N --reason TEXT",
		Short: "Set a project's quota in a pool (admin)",
		Long: `set replaces a project's quota in a pool (admin token). It is a policy change:
a new policy version derived from the active one with only this quota
changed, activated and audited with who, why, before and after; the
scheduler plans with it at its next cycle. The policy file's next edit
supersedes it (a restart on the same file keeps it): copy a lasting change
into the file. While a policy experiment about quotas holds a pool the API
refuses (the experiment is named): the change would confound or end it.
--override-reason sets it anyway (recorded in the audit log), ending the
experiment at once (aborted, policy_changed).` + quotaExitCodes,
		Args: cobra.ExactArgs(2),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().Int64Var(&nominal, "nominal-milli", 0, "nominal quota in milli-GPU (required)")
	cmd.Flags().Int64Var(&borrow, "borrowing-limit-milli", 0, "how much beyond nominal it may borrow, milli-GPU (required; 0: none)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log (required)")
	cmd.Flags().StringVar(&override, "override-reason", "", overrideFlagHelp)
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case !cmd.Flags().Changed("nominal-milli"):
			return newUsageError("quota set: --nominal-milli is required")
		case !cmd.Flags().Changed("borrowing-limit-milli"):
			return newUsageError("quota set: --borrowing-limit-milli is required (0 for no borrowing)")
		case nominal < 0:
			return newUsageError("quota set: --nominal-milli %d is negative", nominal)
		case borrow < 0:
			return newUsageError("quota set: --borrowing-limit-milli %d is negative", borrow)
		case reason == "":
			return newUsageError("quota set: --reason is required")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		ch, err := client.SetQuotaOverride(cmd.Context(), args[0], args[1], nominal, borrow, reason, override)
		return showResult(cmd, format, ch, err, func(w io.Writer, ch *api.QuotaChange) error {
			_, err := io.WriteString(w, describeQuotaChange(ch)+"\n")
			return err
		})
	}
	return cmd
}

// describeQuotaChange says what a quota change did, e.g. "quota of vision
// in a100: nominal 1000 → 3000, borrowing limit 0 → 0 milli-GPU; policy
// 1a2b… → 3c4d…".
func describeQuotaChange(ch *api.QuotaChange) string {
	if !ch.Changed {
		return fmt.Sprintf("quota of %s in %s is already nominal %d, borrowing limit %d milli-GPU; nothing changed",
			ch.Project, ch.Pool, ch.After.NominalMilli, ch.After.BorrowingLimitMilli)
	}
	before := "none (unlimited)"
	if ch.Before != nil {
		before = fmt.Sprintf("nominal %d, borrowing limit %d", ch.Before.NominalMilli, ch.Before.BorrowingLimitMilli)
	}
	return fmt.Sprintf("quota of %s in %s: %s → nominal %d, borrowing limit %d milli-GPU; policy %s → %s (next cycle)",
		ch.Project, ch.Pool, before, ch.After.NominalMilli, ch.After.BorrowingLimitMilli,
		shortHash(ch.PreviousPolicy), shortHash(ch.Policy))
}

// quotaRequestCmd is `gpugov quota request POOL PROJECT --nominal-milli N
// [--borrowing-limit-milli N] --reason TEXT`.
func quotaRequestCmd() *cobra.Command {
	var nominal, borrow int64
	var reason, format string
	cmd := &cobra.Command{
		Use:   "request POOL PROJECT --nominal-milli N [--borrowing-limit-milli N] --reason TEXT",
		Short: "Ask for a project's quota in a pool",
		Long: `request files a quota request for the project (a token of the project, an
operator or an admin): the nominal quota wanted, optionally the borrowing
limit wanted (left out: the current one is kept), and why. An admin approves
it (the quota changes, as quota set) or denies it, with a comment.` + quotaExitCodes,
		Args: cobra.ExactArgs(2),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().Int64Var(&nominal, "nominal-milli", 0, "nominal quota wanted, milli-GPU (required)")
	cmd.Flags().Int64Var(&borrow, "borrowing-limit-milli", 0, "borrowing limit wanted, milli-GPU (default: keep the current one)")
	cmd.Flags().StringVar(&reason, "reason", "", "why the project needs it (required)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case !cmd.Flags().Changed("nominal-milli"):
			return newUsageError("quota request: --nominal-milli is required")
		case nominal < 0:
			return newUsageError("quota request: --nominal-milli %d is negative", nominal)
		case cmd.Flags().Changed("borrowing-limit-milli") && borrow < 0:
			return newUsageError("quota request: --borrowing-limit-milli %d is negative", borrow)
		case reason == "":
			return newUsageError("quota request: --reason is required")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		nr := api.NewQuotaRequest{Pool: args[0], Project: args[1], NominalMilli: &nominal, Reason: reason}
		if cmd.Flags().Changed("borrowing-limit-milli") {
			nr.BorrowingLimitMilli = &borrow
		}
		r, err := client.RequestQuota(cmd.Context(), nr)
		return showResult(cmd, format, r, err, func(w io.Writer, r *api.QuotaRequest) error {
			_, err := fmt.Fprintf(w, "%s: %s asks nominal %d milli-GPU in %s (pending; an admin approves with `gpugov quota approve %s -m TEXT`)\n",
				r.ID, r.Project, r.NominalMilli, r.Pool, r.ID)
			return err
		})
	}
	return cmd
}

// quotaRequestsCmd is `gpugov quota requests [--state STATE]`.
func quotaRequestsCmd() *cobra.Command {
	var state, format string
	cmd := &cobra.Command{
		Use:   "requests [--state pending|approved|denied]",
		Short: "List quota requests, newest first",
		Long: `requests lists the quota requests (a submitter sees its own project's), newest
first, optionally of one state.` + quotaExitCodes,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&state, "state", "", "only requests in this state: pending, approved or denied")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if state != "" && !vocab.QuotaRequestState(state).Valid() {
			return newUsageError("quota requests: --state %q is not pending, approved or denied", state)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		list, err := client.QuotaRequests(cmd.Context(), state)
		return showResult(cmd, format, list, err, func(w io.Writer, list *api.QuotaRequestList) error {
			return writeQuotaRequests(w, list.Requests)
		})
	}
	return cmd
}

// writeQuotaRequests prints requests as a table.
func writeQuotaRequests(w io.Writer, rs []api.QuotaRequest) error {
	if len(rs) == 0 {
		_, err := io.WriteString(w, "no quota requests\n")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPOOL\tPROJECT\tNOMINAL\tBORROW-LIMIT\tBY\tREASON\tDECISION")
	for _, r := range rs {
		borrow := "keep"
		if r.BorrowingLimitMilli != nil {
			borrow = strconv.FormatInt(*r.BorrowingLimitMilli, 10)
		}
		decision := "-"
		if r.DecidedBy != "" {
			decision = r.DecidedBy + ": " + r.Comment
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Pool, r.Project, r.NominalMilli, borrow,
			r.RequestedBy, r.Reason, decision)
	}
	return tw.Flush()
}

// overrideFlagHelp is the help of quota set's and approve's --override-reason.
const overrideFlagHelp = "change the quota even though a policy experiment about quotas holds a pool (it ends the experiment); why, for the audit log"

// quotaDecideCmd is `gpugov quota approve|deny ID -m TEXT` (admin); approve
// takes --override-reason.
func quotaDecideCmd(approve bool) *cobra.Command {
	verb, short, long := "deny", "Deny a quota request (admin)", `deny closes a pending quota request without changing any quota (admin token);
the comment tells the requester why.`
	if approve {
		verb, short, long = "approve", "Approve a quota request: the quota changes (admin)", `approve grants a pending quota request (admin token): the quota is set as
quota set does — a policy version derived from the active one — and the
scheduler plans with it at its next cycle. While a policy experiment about
quotas holds a pool the API refuses, as for quota set; --override-reason
approves anyway.`
	}
	var message, override, format string
	cmd := &cobra.Command{
		Use:   verb + " REQUEST-ID -m TEXT",
		Short: short,
		Long:  long + quotaExitCodes,
		Args:  cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&message, "message", "m", "", "the decision's comment (required)")
	if approve {
		cmd.Flags().StringVar(&override, "override-reason", "", overrideFlagHelp)
	}
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if message == "" {
			return newUsageError("quota %s: -m TEXT is required", verb)
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		var r *api.QuotaRequest
		if approve {
			r, err = client.ApproveQuotaRequestOverride(cmd.Context(), args[0], message, override)
		} else {
			r, err = client.DecideQuotaRequest(cmd.Context(), args[0], false, message)
		}
		if err != nil {
			return apiFailure(err)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), r)
		}
		line := fmt.Sprintf("%s: %s by %s (%s)", r.ID, r.State, r.DecidedBy, r.Comment)
		if r.Change != nil {
			line += "; " + describeQuotaChange(r.Change)
		}
		_, err = io.WriteString(cmd.OutOrStdout(), line+"\n")
		return err
	}
	return cmd
}
