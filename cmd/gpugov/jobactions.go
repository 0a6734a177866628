package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
)

// This file holds the client commands that change a job's course: cancel,
// hold and release (POST /v1/jobs/{id}/cancel|hold|release). Each is audited
// by the service with the token's name as actor and the --reason given.

func init() {
	rootCmd.AddCommand(
		jobActionCmd("cancel", "Cancel a job",
			`cancel ends a job: a waiting job is cancelled at once; a placed or running
job's run is stopped and its GPUs released by its workflow. The job's project,
an operator or an admin may call it.`,
			(*apiclient.Client).Cancel),
		jobActionCmd("hold", "Hold a pending job",
			`hold keeps a submitted or waiting job from being placed: it waits with reason
held, which earns no aging credit, until it is released. The job's project, an
operator or an admin may call it.`,
			(*apiclient.Client).Hold),
		jobActionCmd("release", "Release a held job",
			`release lifts a hold; the scheduler, woken by the call, evaluates the job on
its next cycle. The job's project, an operator or an admin may call it.`,
			(*apiclient.Client).Release),
	)
}

// jobActionCmd is `gpugov VERB JOB-ID [--reason TEXT]`, calling act and
// printing the job as the API answers it (--format text or json).
func jobActionCmd(verb, short, long string, act func(*apiclient.Client, context.Context, string, string) (*api.Job, error)) *cobra.Command {
	var reason, format string
	cmd := &cobra.Command{
		Use:   verb + " JOB-ID [--reason TEXT]",
		Short: short,
		Long: long + `
Exit codes: 0 done, 2 bad arguments or a request the API refused (e.g. 409 for
a job in a state that does not allow it: for a finished job cancel, hold and
release all say "job is STATE, a final state: it cannot be …"), 1 server or
network failure.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().StringVar(&format, "format", "text", "output: text or json (the job)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		job, err := act(client, cmd.Context(), args[0], reason)
		if err != nil {
			return apiFailure(err)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), job)
		}
		held := ""
		if job.Held {
			held = ", held"
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s%s\n", job.ID, job.State, held)
		return err
	}
	return cmd
}
