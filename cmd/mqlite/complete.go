package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// completeQueues completes a QUEUE argument with the names of the queues of
// the store the flags (or the environment) name: "mqlite completion" makes
// the shell ask for them. It gives up quietly after a second.
func (g *globals) completeQueues(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	g.applyEnv(cmd)
	g.retryFor = -1
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Second)
	defer cancel()
	var names []string
	err := g.read(ctx, func(b backend) error {
		qs, err := b.ListQueues(ctx)
		for _, q := range qs {
			names = append(names, q.Name)
		}
		return err
	})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
