// Command gpugov is the single gpugov binary: the service (serve), the node agent
// (agent), the trace tools (simulate, replay), database migrations (migrate) and
// the client commands (submit, get, why, queues, report …). Each subcommand lives
// in its own file of this package and registers itself on rootCmd in init.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
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

func main() {
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpugov:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
