package api

import (
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

func TestARole(t *testing.T) {
	for r, want := range map[vocab.Role]string{vocab.RoleAdmin: "an admin", vocab.RoleOperator: "an operator",
		vocab.RoleAgent: "an agent", vocab.RoleSubmitter: "a submitter"} {
		if got := aRole(r); got != want {
			t.Errorf("aRole(%s) = %q, want %q", r, got, want)
		}
	}
}
