package main

import (
	"errors"
	"testing"
)

// A wrong number of positional arguments is a usage error (exit 2) in the
// command's words: it was cobra's "accepts 1 arg(s), received 0".
func TestWrongArgumentCountInWords(t *testing.T) {
	env := newCLIEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"why"}, "why: needs one JOB-ID (got none)"},
		{[]string{"why", "j-1", "j-2"}, "why: needs one JOB-ID (got 2 arguments)"},
		{[]string{"prereq", "j-1"}, "prereq: needs JOB-ID and NAME (got 1 argument)"},
		{[]string{"get", "j-1", "j-2"}, "get: takes at most one JOB-ID (got 2 arguments)"},
		{[]string{"quota", "set", "alibaba"}, "quota set: needs POOL and PROJECT (got 1 argument)"},
		{[]string{"queues", "x"}, "queues: takes no arguments (got 1 argument)"},
	} {
		_, _, err := env.run(t, c.args...)
		var ue usageError
		if !errors.As(err, &ue) || err.Error() != c.want {
			t.Errorf("%v: %v, want the usage error %q", c.args, err, c.want)
		}
	}
}
