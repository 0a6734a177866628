package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds `gpugov audit` (GET /v1/audit), `gpugov complete`
// (POST /v1/jobs/{id}/complete) and the reclaim dispute commands
// (`gpugov reclaims dispute|reject-dispute`).

// maxEvidenceWidth bounds the evidence line of `gpugov audit`'s table
// (runes); --format json has all of it.
const maxEvidenceWidth = 240

func init() {
	var o apiclient.AuditOptions
	var since, until string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "The audit log: every governance action with who, why and the evidence (operator or admin token)",
		Long: `audit lists the audit log, newest first: each governance action (policy switch,
stage change, preemption step, drill, reclaim step, dispute, hold, quota change,
amendment, completion, override…) with its time, actor (who), action, subject,
reason (why) and evidence (docs/design.md §3 "The audit" lists the actions and
their evidence keys). --since and --until take an RFC 3339 time or a duration
before now (24h, 90m). One page per call: pass the printed --cursor for the next.

--action takes one of the actions docs/design.md's table lists (vocab.AuditActions);
any other is refused naming --action with the list.

Exit codes: 0 done, 2 bad flags or a request the API refused (e.g. 403 for a
submitter token), 1 server or network failure.`,
		Args: cobra.NoArgs,
	}
	l := addListFlags(cmd, &o.Limit)
	cmd.Flags().StringVar(&o.Subject, "subject", "", "only entries about this job, preemption, pool, quota (pool/project), policy hash or request ID")
	cmd.Flags().StringVar(&o.Action, "action", "", "only this action, e.g. reclaim_dispute, set_pool_stage, preempt_finish")
	cmd.Flags().StringVar(&o.Actor, "actor", "", "only this actor: a token's name or a component (scheduler, governance, reclaim, serve)")
	cmd.Flags().StringVar(&since, "since", "", "entries at or after this time: RFC 3339, or a duration before now (24h)")
	cmd.Flags().StringVar(&until, "until", "", "entries before this time: RFC 3339, or a duration before now")
	cmd.Flags().StringVar(&o.Cursor, "cursor", "", "the next page: the cursor the previous page printed")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.Action != "" && !vocab.ValidAuditAction(o.Action) {
			return newUsageError("--action %q: not an audit action; want one of %s", o.Action, strings.Join(vocab.AuditActions, ", "))
		}
		client, err := l.client()
		if err != nil {
			return err
		}
		if o.Since, err = pointInTime("--since", since); err != nil {
			return err
		}
		if o.Until, err = pointInTime("--until", until); err != nil {
			return err
		}
		list, err := client.Audit(cmd.Context(), o)
		return show(cmd, l, list, err, printAudit)
	}
	rootCmd.AddCommand(cmd)
	rootCmd.AddCommand(completeCmd())
}

// pointInTime parses --since/--until: an RFC 3339 time, or a duration
// before now (clientNow); empty gives the zero time. Anything else is a
// usage error naming the flag.
func pointInTime(flag, v string) (time.Time, error) {
	if v = strings.TrimSpace(v); v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return clientNow().Add(-d), nil
	}
	return time.Time{}, newUsageError("%s %q: want an RFC 3339 time (2026-12-01T10:00:00Z) or a duration before now (24h)", flag, v)
}

// printAudit writes one row per entry (time, actor, action, subject,
// reason) with its evidence on an indented line below (sorted key=value
// pairs), and the next page's cursor.
func printAudit(w io.Writer, l *api.AuditList) error {
	if len(l.Entries) == 0 {
		_, err := fmt.Fprintln(w, "no audit entries (none recorded, or none match the filters)")
		return err
	}
	// The rows are aligned on their own (a line without the columns would
	// end tabwriter's block), then each is followed by its evidence.
	var rows bytes.Buffer
	tw := tabwriter.NewWriter(&rows, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tSUBJECT\tREASON")
	for _, e := range l.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Actor, e.Action, e.Subject, oneLine(e.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n")
	var b strings.Builder
	b.WriteString(lines[0] + "\n")
	for i, e := range l.Entries {
		b.WriteString(lines[i+1] + "\n    evidence: " + evidenceText(e.Evidence) + "\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if l.NextCursor != "" {
		_, err := fmt.Fprintf(w, "\n%s; older ones: --cursor %s\n", plural.Count(len(l.Entries), "entry", "entries"), l.NextCursor)
		return err
	}
	return nil
}

// evidenceText renders evidence as "k=v" pairs in key order, values as
// compact JSON unless plain strings, cut at maxEvidenceWidth runes; "-"
// when there is none.
func evidenceText(ev map[string]any) string {
	keys := make([]string, 0, len(ev))
	for k := range ev {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v, ok := ev[k].(string)
		if !ok {
			b, err := json.Marshal(ev[k])
			if err != nil {
				b = []byte("?")
			}
			v = string(b)
		}
		parts = append(parts, k+"="+oneLine(v))
	}
	s := strings.Join(parts, " ")
	if r := []rune(s); len(r) > maxEvidenceWidth {
		s = string(r[:maxEvidenceWidth-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

// oneLine replaces line breaks and tabs so that a value keeps the table's shape.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ").Replace(s)
}

// completeCmd is `gpugov complete JOB-ID [--reason TEXT]`.
func completeCmd() *cobra.Command {
	var reason, format string
	cmd := &cobra.Command{
		Use:   "complete JOB-ID [--reason TEXT]",
		Short: "Declare a placed or running job's work done (cleanup pending): its GPUs are reclaimed as completed",
		Long: `complete records that a job's work is done and only cleanup still holds its GPUs
(POST /v1/jobs/{id}/complete). The next reclaim scan classifies its allocation
completed and handles it in the mode the policy gives (e.g. auto: the run is
stopped and the GPUs released). The job's project, an operator or an admin may
call it; it is audited with the token's name and --reason.

Exit codes: 0 done, 2 bad arguments or a request the API refused (e.g. 409 for
a job holding no GPUs), 1 server or network failure.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why the work is done, for the audit log")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the declaration)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		done, err := client.Complete(cmd.Context(), args[0], reason)
		return showResult(cmd, format, done, err, func(w io.Writer, done *api.JobCompletion) error {
			_, err := fmt.Fprintf(w, "%s: work declared done by %s at %s (allocation %s): %s\n", done.JobID, done.DeclaredBy,
				done.DeclaredAt.UTC().Format(time.RFC3339), done.AllocationID, done.Note)
			return err
		})
	}
	return cmd
}

// reclaimDisputeCmd is `gpugov reclaims dispute|reject-dispute ID --reason …`:
// call records at once (no workflow decides it) and the reclaim is printed.
func reclaimDisputeCmd(verb, short string, call func(*apiclient.Client, context.Context, string, string) (*api.Reclaim, error)) *cobra.Command {
	var reason, format string
	cmd := &cobra.Command{Use: verb + " ID --reason TEXT", Short: short, Args: cobra.ExactArgs(1)}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; goes to the audit log)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the reclaim)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if strings.TrimSpace(reason) == "" {
			return newUsageError("--reason is required: say why")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		r, err := call(client, cmd.Context(), args[0], reason)
		return showResult(cmd, format, r, err, func(w io.Writer, r *api.Reclaim) error {
			verdict := "no longer a false reclaim (dispute rejected by " + r.DisputeRejectedBy + ")"
			if r.FalseReclaim {
				verdict = "a false reclaim unless an operator rejects the dispute"
			}
			_, err := fmt.Fprintf(w, "reclaim %s (allocation %s, %s, %s) disputed by %s: %s\n", r.ID, r.AllocationID, r.Class,
				r.State, r.DisputeBy, verdict)
			return err
		})
	}
	return cmd
}
