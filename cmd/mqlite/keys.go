package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/wire"
)

func printKeys(w io.Writer, ks []client.Key) {
	fmt.Fprintln(w, "ID\tROLE\tQUEUES\tCREATED\tREVOKED")
	for _, k := range ks {
		rev := "-"
		if !k.RevokedAt.IsZero() {
			rev = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Role, strings.Join(k.Queues, ","), k.CreatedAt.Format(time.RFC3339), rev)
	}
}

func keysCmd(g *globals) *cobra.Command {
	var role string
	var queues []string
	create := &cobra.Command{
		Use: "create", Short: "make an access key; its secret is printed once", Args: noArgs,
		Long: `create makes an access key for the broker. The secret is printed once, alone on
stdout (the key's id and scope go to stderr; --json prints one object), and
only its hash is kept: store it now. Roles: producer (send), consumer (receive,
settle, peek, stats), admin (everything). --queue limits the key to queues
and topics by name; "*" is all of them.`,
		Example: `  KEY=$(mqlite keys create --role admin --queue '*' --db app.db)
  mqlite keys create --role consumer --queue orders --url http://127.0.0.1:7420 --key $ADMIN_KEY`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if role == "" || len(queues) == 0 {
				return usagef("keys create needs --role and --queue")
			}
			return g.withCreate(cmd.Context(), func(b backend) error {
				k, secret, err := b.CreateKey(cmd.Context(), role, queues)
				if err != nil {
					return err
				}
				if g.json {
					return g.writeJSON(wire.CreateKeyResponse{Key: wire.Key(k), Secret: secret})
				}
				// Only the secret on stdout, so that KEY=$(mqlite keys create ...)
				// captures it alone; the rest is for the person at the terminal.
				fmt.Fprintf(g.stderr, "created key %s (%s on %s); its secret, on stdout, is shown once: store it now\n",
					k.ID, k.Role, strings.Join(k.Queues, ","))
				_, err = fmt.Fprintln(g.stdout, secret)
				return err
			})
		},
	}
	create.Flags().StringVar(&role, "role", "", "producer, consumer, worker (both) or admin")
	create.Flags().StringArrayVar(&queues, "queue", nil, "a queue or topic the key covers, or * for all (repeat)")
	list := &cobra.Command{
		Use: "list", Short: "list the access keys (never their secrets)", Args: noArgs,
		Example: `  mqlite keys list --db app.db`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				ks, err := b.ListKeys(cmd.Context())
				if err != nil {
					return err
				}
				out := wire.KeysResponse{Keys: make([]wire.Key, len(ks))}
				for i, k := range ks {
					out.Keys[i] = wire.Key(k)
				}
				return g.emit(out, func(w io.Writer) { printKeys(w, ks) })
			})
		},
	}
	var revokeYes bool
	revoke := yesFlag(&cobra.Command{
		Use: "revoke ID", Short: "revoke an access key", Args: exactArgs(1),
		Example: `  mqlite keys revoke 3f2a9c0d11e4b7a8 --yes --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				if err := g.confirm(revokeYes, fmt.Sprintf("revoke key %s (its holders lose access at once)", args[0])); err != nil {
					return err
				}
				if err := b.RevokeKey(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"revoked": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "revoked key %s\n", args[0]) })
			})
		},
	}, &revokeYes)
	return withExample(`  mqlite keys create --role producer --queue orders --db app.db
  mqlite keys list --url http://127.0.0.1:7420 --key $ADMIN_KEY`, group("keys", "access keys of the broker: create, list, revoke", create, list, revoke))
}
