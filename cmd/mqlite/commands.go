package main

import "github.com/spf13/cobra"

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("%s needs a subcommand; run '%s --help'", cmd.CommandPath(), cmd.CommandPath())
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// withExample sets cmd's example and returns it.
func withExample(example string, cmd *cobra.Command) *cobra.Command {
	cmd.Example = example
	return cmd
}
