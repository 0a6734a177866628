package main

import (
	"bytes"
	"context"
	"testing"
)

// TestWrongArgumentCountIsUsageError: every command's positional-argument
// check answers a usage error (exit code 2), as do unknown commands and
// flags, while a valid call is not refused for its arguments.
func TestWrongArgumentCountIsUsageError(t *testing.T) {
	cases := [][]string{
		{"why"},
		{"get", "a", "b"},
		{"submit", "-f", "job.yaml", "extra"},
		{"queues", "extra"},
		{"report", "extra"},
		{"events"},
		{"inventory", "import"},
		{"nosuchcommand"},
		{"why", "--nosuchflag", "j-1"},
	}
	for _, args := range cases {
		var out bytes.Buffer
		rootCmd.SetOut(&out)
		rootCmd.SetErr(&out)
		rootCmd.SetArgs(args)
		err := rootCmd.ExecuteContext(context.Background())
		rootCmd.SetArgs(nil)
		if err == nil || !isUsage(err) {
			t.Errorf("gpugov %v: error %v, want a usage error (exit code 2)", args, err)
		}
	}
}
