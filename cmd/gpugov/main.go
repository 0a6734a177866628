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

// usageArgs makes a wrong number of arguments a usage error (exit code 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
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
