package main

import (
	"context"
	"strings"
	"testing"
)

// TestLoadRejectsBadFlags: out-of-range settings of `gpugov load` are usage
// errors (exit code 2) naming the flag, before anything is contacted.
func TestLoadRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--get-rate", "-1"}, "--get-rate"},
		{[]string{"--cancel-share", "1.5"}, "--cancel-share"},
		{[]string{"--wait-share", "-0.1"}, "--wait-share"},
		{[]string{"--run-seconds", "0"}, "--run-seconds"},
		{[]string{"--drain", "0s"}, "--drain"},
		{[]string{"--max-growth", "0"}, "--max-growth"},
		{[]string{"--format", "xml"}, "xml"},
		{[]string{"--burst", "-1"}, "--burst"},
		{[]string{"--backlog", "-5"}, "--backlog"},
		{[]string{"--burst", "10", "--backlog", "10"}, "--burst and --backlog"},
		{[]string{"--burst", "10", "--burst-concurrency", "0"}, "--burst-concurrency"},
		{[]string{"--burst", "10", "--floor-rate", "0"}, "--floor-rate"},
		{[]string{"--backlog", "10", "--backlog-hold", "0s"}, "--backlog-hold"},
	} {
		_, _, err := runGpugov(context.Background(), append([]string{"load", "--api", "http://127.0.0.1:1"}, c.args...)...)
		if err == nil || !isUsage(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load %v: err %v, want a usage error naming %s", c.args, err, c.want)
		}
	}
}
