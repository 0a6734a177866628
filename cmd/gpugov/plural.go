package main

import "fmt"

// gpusText is a number of GPUs (whole or not, e.g. GPUs released) with its
// noun: "1 GPU", "0.5 GPU", "2 GPUs". Counts of anything else go through
// plural.Count (internal/plural), which the server's texts share.
func gpusText(g float64) string {
	if g == 1 || (g > 0 && g < 1) {
		return fmt.Sprintf("%g GPU", g)
	}
	return fmt.Sprintf("%g GPUs", g)
}
