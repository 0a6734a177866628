// Package plural renders counts with their nouns in English for every text
// gpugov prints or stores: the CLI's tables and footers (cmd/gpugov) and
// the server's details (wait reasons, readiness checks, simulation
// reports), instead of "1 entries" or "drill(s)".
package plural

import "strconv"

// Count renders n with its noun: one for exactly 1, many otherwise
// ("1 entry", "0 entries", "2 entries").
func Count(n int, one, many string) string {
	if n == 1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}
