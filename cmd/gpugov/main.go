// Command gpugov is the single gpugov binary: the service (serve), the node agent
// (agent), the trace tools (simulate, replay), database migrations (migrate) and
// the client commands (submit, get, why, queues, report …). Each subcommand lives
// in its own file of this package and registers itself on rootCmd in init.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/store"
)

// rootCmd is the top of the command tree; subcommand files add themselves to it.
var rootCmd = &cobra.Command{
	Use:           "gpugov",
	Short:         "gpugov governs a shared GPU pool: placement, wait reasons, preemption, reclaim, experiments",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// usageError marks an error caused by bad input (flags, files, fields); main
// exits with code 2 for it, as the project's CLI convention requires.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newUsageError wraps err so that main exits with code 2.
func newUsageError(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func init() {
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// Initializers run after flag parsing and before the positional
	// arguments are checked, and after every file's init has added its
	// command, so every command is covered.
	cobra.OnInitialize(func() { wrapArgsOnce.Do(func() { wrapArgs(rootCmd) }) })
}

// wrapArgsOnce guards wrapArgs: tests execute rootCmd many times.
var wrapArgsOnce sync.Once

// wrapArgs makes a wrong number of positional arguments a usage error (exit
// code 2) on cmd and every command below it, whatever check it declares.
func wrapArgs(cmd *cobra.Command) {
	if cmd.Args != nil {
		cmd.Args = usageArgs(cmd.Args)
	}
	for _, c := range cmd.Commands() {
		wrapArgs(c)
	}
}

// usageArgs makes a wrong number of arguments a usage error (exit code 2)
// in the command's words (argsProblem), not cobra's ("accepts 1 arg(s),
// received 0").
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{errors.New(argsProblem(cmd, len(args)))}
		}
		return nil
	}
}

// argsProblem says what cmd takes, from the positional arguments its Use
// line names ("why JOB-ID": "why: needs one JOB-ID (got none)"; "get
// [JOB-ID]": "get: takes at most one JOB-ID (got 2 arguments)"; "queues":
// "queues: takes no arguments (got 1)"), and how many it was given.
func argsProblem(cmd *cobra.Command, got int) string {
	name := strings.TrimPrefix(cmd.CommandPath(), rootCmd.Name()+" ")
	var required, optional []string
	for _, tok := range strings.Fields(cmd.Use)[1:] {
		if strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "(") || strings.HasPrefix(tok, "[-") {
			break // flags follow; the positional arguments come first
		}
		if inner, ok := strings.CutPrefix(tok, "["); ok {
			optional = append(optional, strings.TrimSuffix(inner, "]"))
		} else {
			required = append(required, tok)
		}
	}
	gave := "none"
	switch {
	case got == 1:
		gave = "1 argument"
	case got > 1:
		gave = fmt.Sprintf("%d arguments", got)
	}
	switch {
	case len(required) == 0 && len(optional) == 0:
		return fmt.Sprintf("%s: takes no arguments (got %s)", name, gave)
	case len(required) == 0:
		return fmt.Sprintf("%s: takes at most %s (got %s)", name, argList(optional), gave)
	case len(optional) == 0:
		return fmt.Sprintf("%s: needs %s (got %s)", name, argList(required), gave)
	}
	return fmt.Sprintf("%s: needs %s and at most %s more (got %s)", name, argList(required), argList(optional), gave)
}

// argList names arguments in words: "one JOB-ID", "POOL and PROJECT".
func argList(names []string) string {
	if len(names) == 1 {
		return "one " + names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// isUsage reports whether err is a usage error: a usageError, a database URL
// naming a database that does not exist (store.MissingDatabaseError: a
// mistyped --database-url), or cobra's "unknown command" (found before any
// command runs, so it cannot be wrapped).
func isUsage(err error) bool {
	var ue usageError
	var missing *store.MissingDatabaseError
	return errors.As(err, &ue) || errors.As(err, &missing) || strings.HasPrefix(err.Error(), "unknown command ")
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpugov:", err)
		if isUsage(err) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
