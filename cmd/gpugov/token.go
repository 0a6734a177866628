package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// `gpugov token create|list|revoke`: API tokens kept in PostgreSQL
// (api_tokens, docs/design.md §2 "API tokens"), which every serve replica
// on the database accepts. They talk to PostgreSQL directly, as migrate
// does: whoever may write the database may mint tokens.
func init() {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API bearer tokens stored (hashed) in PostgreSQL",
		Long: `token manages the API tokens that gpugov serve reads from PostgreSQL besides its
token file. Only a token's SHA-256 is stored; create prints the token once.
The database is --database-url, else $DATABASE_URL, else ` + defaultDatabaseURL + `.`,
	}
	cmd.PersistentFlags().StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	open := func(ctx context.Context) (*store.Store, error) {
		url := cmp.Or(databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
		if err := store.Migrate(ctx, url); err != nil {
			return nil, err
		}
		return store.Open(ctx, url)
	}
	cmd.AddCommand(tokenCreateCmd(open), tokenListCmd(open), tokenRevokeCmd(open))
	rootCmd.AddCommand(cmd)
}

// tokenActor is who a token command's audit entry names: the OS user.
func tokenActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	return "cli"
}

type openStore func(ctx context.Context) (*store.Store, error)

func tokenCreateCmd(open openStore) *cobra.Command {
	var p api.Principal
	var role string
	cmd := &cobra.Command{
		Use:   "create --role ROLE --project PROJECT [--node NODE] [--name NAME]",
		Short: "Make a new token, store its SHA-256 and print the token once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.Role = vocab.Role(role)
			if err := p.Validate(); err != nil {
				return newUsageError("%v", err)
			}
			if p.Name == "" {
				p.Name = string(p.Role) + "@" + p.Project
			}
			token, err := api.NewToken()
			if err != nil {
				return err
			}
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			d := api.DigestToken(token)
			t, err := st.CreateAPIToken(cmd.Context(), store.APIToken{Digest: d[:], Name: p.Name, Project: p.Project,
				Role: string(p.Role), Node: p.Node}, tokenActor())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "created token %s (%s, role %s, project %s); it is shown only now:\n", t.ID, t.Name, t.Role, t.Project)
			fmt.Fprintln(cmd.OutOrStdout(), token)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&role, "role", "", "submitter, operator, admin or agent (required)")
	f.StringVar(&p.Project, "project", "", "the token's project (required)")
	f.StringVar(&p.Node, "node", "", "the node an agent token reports for (required for --role agent, only for it)")
	f.StringVar(&p.Name, "name", "", "the actor name audit entries record (default ROLE@PROJECT)")
	return cmd
}

func tokenListCmd(open openStore) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the stored tokens (never the tokens themselves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			ts, err := st.ListAPITokens(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tROLE\tPROJECT\tNODE\tCREATED\tREVOKED")
			for _, t := range ts {
				revoked := "-"
				if t.RevokedAt != nil {
					revoked = t.RevokedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, t.Project, cmp.Or(t.Node, "-"),
					t.CreatedAt.UTC().Format(time.RFC3339), revoked)
			}
			return w.Flush()
		},
	}
}

func tokenRevokeCmd(open openStore) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "Revoke a stored token: every replica refuses it from the next request on",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return newUsageError("revoke takes one token ID (see gpugov token list), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			revoked, err := st.RevokeAPIToken(cmd.Context(), args[0], tokenActor(), reason, time.Now())
			if errors.Is(err, store.ErrNotFound) {
				return newUsageError("no token %s (see gpugov token list)", args[0])
			}
			if err != nil {
				return err
			}
			if revoked {
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was already revoked\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}
