package store_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// strs returns the string values of a vocab list, plus extra.
func strs[T ~string](vs []T, extra ...string) []string {
	out := append([]string(nil), extra...)
	for _, v := range vs {
		out = append(out, string(v))
	}
	return out
}

// tierNames returns the names of every tier.
func tierNames() []string {
	out := make([]string, len(vocab.Tiers))
	for i, t := range vocab.Tiers {
		out[i] = t.String()
	}
	return out
}

// liveStates returns the job states that are not final.
func liveStates() []string {
	var out []string
	for _, s := range vocab.JobStates {
		if !s.Final() {
			out = append(out, string(s))
		}
	}
	return out
}

// finalStates returns the job states that are final.
func finalStates() []string {
	var out []string
	for _, s := range vocab.JobStates {
		if s.Final() {
			out = append(out, string(s))
		}
	}
	return out
}

// checkLiteral matches one text literal of a CHECK constraint as
// pg_get_constraintdef renders it: 'value'::text.
var checkLiteral = regexp.MustCompile(`'((?:[^']|'')*)'::text`)

// columnCheckValues returns the values the CHECK constraints on table.column
// accept, read from the migrated database: the text literals of each CHECK
// that covers that column alone. It fails the test unless exactly one such
// constraint lists values.
func columnCheckValues(t *testing.T, conn *pgx.Conn, table, column string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT c.conname, pg_get_constraintdef(c.oid)
		FROM pg_constraint c
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
		WHERE c.contype = 'c' AND c.conrelid = $1::regclass AND a.attname = $2 AND cardinality(c.conkey) = 1`,
		table, column)
	if err != nil {
		t.Fatalf("%s.%s: read constraints: %v", table, column, err)
	}
	defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var name, def string
		err := r.Scan(&name, &def)
		return name + ": " + def, err
	})
	if err != nil {
		t.Fatalf("%s.%s: read constraints: %v", table, column, err)
	}
	var values []string
	n := 0
	for _, def := range defs {
		ms := checkLiteral.FindAllStringSubmatch(def, -1)
		if len(ms) == 0 {
			continue
		}
		n++
		for _, m := range ms {
			values = append(values, strings.ReplaceAll(m[1], "''", "'"))
		}
	}
	if n != 1 {
		t.Fatalf("%s.%s: %d CHECK constraints list values, want 1 (%q)", table, column, n, defs)
	}
	return values
}

// TestVocabularyMatchesDatabaseChecks compares every column that holds a
// term of internal/vocab with the vocabulary: the CHECK constraint of a
// freshly migrated database must accept exactly the vocabulary's values, so
// a state, outcome, reason, class, mode, stage or tier added in one place
// only fails here. A column without a CHECK fails too.
func TestVocabularyMatchesDatabaseChecks(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cases := []struct {
		table, column string
		want          []string
	}{
		{"jobs", "state", strs(vocab.JobStates)},
		{"jobs", "tier", tierNames()},
		{"jobs", "reason", strs(vocab.WaitReasons)},
		{"job_queue", "state", liveStates()},
		{"job_queue", "tier", tierNames()},
		{"queues", "tier", tierNames()},
		{"pools", "stage", strs(vocab.AutomationStages)},
		{"runs", "outcome", strs(vocab.RunOutcomes)},
		{"wait_events", "reason", strs(vocab.RecordedReasons)},
		{"preemptions", "state", strs(vocab.PreemptionStates)},
		{"preemptions", "outcome", strs(vocab.PreemptionOutcomes)},
		{"reclaims", "class", strs(vocab.ReclaimClasses)},
		{"reclaims", "mode", strs(vocab.ReclaimModes)},
		{"quota_requests", "state", strs(vocab.QuotaRequestStates)},
		{"reclaims", "configured_mode", strs(vocab.ReclaimModes, "")},
		{"reclaims", "stage", strs(vocab.AutomationStages, "")},
		{"reclaims", "state", strs(vocab.ReclaimStates)},
		{"notifications", "kind", strs(vocab.NotificationKinds)},
		{"notifications", "state", strs(vocab.NotificationStates)},
		{"resume_evidence", "kind", strs(vocab.ResumeEvidenceKinds)},
		{"preemptions", "final_state", finalStates()},
		{"resume_evidence", "outcome", strs(vocab.ResumeOutcomes)},
		{"experiments", "state", strs(vocab.ExperimentStates)},
		{"experiments", "verdict", strs(vocab.ExperimentVerdicts)},
		{"experiments", "groups", strs(vocab.PolicyGroups)},
		{"experiment_events", "kind", store.ExperimentEventKinds},
		{"preemptions", "kind", strs(vocab.PreemptionKinds)},
		{"pool_stage_changes", "from_stage", strs(vocab.AutomationStages)},
		{"pool_stage_changes", "to_stage", strs(vocab.AutomationStages)},
		{"pool_stage_changes", "outcome", strs(vocab.StageChangeOutcomes)},
		{"api_tokens", "role", strs(vocab.Roles)},
	}
	for _, tc := range cases {
		t.Run(tc.table+"."+tc.column, func(t *testing.T) {
			got := columnCheckValues(t, conn, tc.table, tc.column)
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("CHECK of %s.%s accepts %q; internal/vocab has %q", tc.table, tc.column, got, want)
			}
		})
	}
}
