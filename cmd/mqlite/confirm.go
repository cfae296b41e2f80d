package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// errAborted is a destructive command the user answered no to.
var errAborted = errors.New("aborted: nothing was changed")

// yesFlag adds --yes to a destructive command.
func yesFlag(cmd *cobra.Command, yes *bool) *cobra.Command {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do it without asking (needed when standard input is not a terminal)")
	return cmd
}

// confirm asks question on a terminal and goes on only on "y" or "yes".
// Without a terminal to ask on it refuses (a usage error) unless yes: a
// script must say --yes, and a pipe never answers for it.
func (g *globals) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	if !g.terminal(g.stdin) || g.json {
		return usagef("%s: refusing without --yes (standard input is not a terminal to ask on)", question)
	}
	fmt.Fprintf(g.stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(g.stdin).ReadString('\n')
	if err != nil && line == "" {
		return errAborted
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errAborted
}
