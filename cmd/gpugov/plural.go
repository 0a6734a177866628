package main

import "fmt"

// plural renders a count with its noun in English: "1 entry", "0 entries",
// "2 entries" (one for exactly 1, many otherwise). Every count printed with
// a noun in cmd/gpugov goes through it, instead of "1 entries" or "entry(s)".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// gpusText is a number of GPUs (whole or not, e.g. GPUs released) with its
// noun: "1 GPU", "0.5 GPU", "2 GPUs".
func gpusText(g float64) string {
	if g == 1 || (g > 0 && g < 1) {
		return fmt.Sprintf("%g GPU", g)
	}
	return fmt.Sprintf("%g GPUs", g)
}
