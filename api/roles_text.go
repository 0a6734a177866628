package api

import "github.com/gpugov/gpugov/internal/vocab"

// aRole is a role with its indefinite article, for the 403 messages:
// "an admin", "an operator", "an agent", "a submitter".
func aRole(r vocab.Role) string {
	if r != "" && (r[0] == 'a' || r[0] == 'e' || r[0] == 'i' || r[0] == 'o' || r[0] == 'u') {
		return "an " + string(r)
	}
	return "a " + string(r)
}
