package main

import (
	"bytes"
	"context"
	"strings"
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

// TestListLimitOutOfRangeIsUsageError: a --limit given outside the API's
// 1..1000 is a usage error naming --limit before any request, for get and
// the shared list flags (notifications, preemptions, reclaims).
func TestListLimitOutOfRangeIsUsageError(t *testing.T) {
	defer resetFlags(rootCmd)
	for _, args := range [][]string{
		{"get", "--limit", "-1"},
		{"get", "--limit", "0"},
		{"get", "--limit", "1001"},
		{"notifications", "--limit", "0"},
		{"preemptions", "--limit", "0"},
		{"reclaims", "--limit", "-5"},
	} {
		resetFlags(rootCmd)
		var out bytes.Buffer
		rootCmd.SetOut(&out)
		rootCmd.SetErr(&out)
		rootCmd.SetArgs(append(args, "--api", "http://127.0.0.1:1", "--token", "t"))
		err := rootCmd.ExecuteContext(context.Background())
		rootCmd.SetArgs(nil)
		if err == nil || !isUsage(err) || !strings.Contains(err.Error(), "--limit") {
			t.Errorf("gpugov %v: error %v, want a usage error naming --limit (exit code 2)", args, err)
		}
	}
}
