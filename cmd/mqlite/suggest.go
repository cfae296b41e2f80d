package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
)

// suggested is an error with a did-you-mean hint after its text.
type suggested struct {
	err  error
	hint string
}

func (e suggested) Error() string { return fmt.Sprintf("%s (did you mean %s?)", e.err, e.hint) }
func (e suggested) Unwrap() error { return e.err }

// closest returns the candidates nearest to name, at an edit distance of
// at most a third of name's length (at least 1, at most 3); none when name
// is one of them.
func closest(name string, candidates []string) []string {
	limit := min(max(len(name)/3, 1), 3)
	var best []string
	for _, c := range candidates {
		switch d := levenshtein(name, c); {
		case d == 0:
			return nil
		case d < limit:
			limit, best = d, []string{c}
		case d == limit && !slices.Contains(best, c):
			best = append(best, c)
		}
	}
	return best
}

// levenshtein is the edit distance between a and b, in bytes.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quoteAll quotes each name and joins them with "or".
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, " or ")
}

// unknownFlag matches pflag's error for a long flag it does not know.
var unknownFlag = regexp.MustCompile(`^unknown flag: --([^\s=]+)`)

// flagError is the root's FlagErrorFunc: a usage error, with the nearest
// flags of cmd for an unknown one.
func flagError(cmd *cobra.Command, err error) error {
	m := unknownFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return usageError{err}
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if near := closest(m[1], names); len(near) > 0 {
		for i := range near {
			near[i] = "--" + near[i]
		}
		return usageError{suggested{err, quoteAll(near)}}
	}
	return usageError{err}
}

// notFoundName matches the name in a queue-not-found error's text.
var notFoundName = regexp.MustCompile(`queue not found: "((?:[^"\\]|\\.)*)"`)

// suggestQueue adds to err, when it says a queue was not found, the
// nearest names among b's queues and topics. What cannot be listed (a key
// scoped to other queues) is left out without a word.
func suggestQueue(ctx context.Context, b backend, err error) error {
	if !errors.Is(err, mqlite.ErrQueueNotFound) {
		return err
	}
	m := notFoundName.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	var names []string
	if qs, lerr := b.ListQueues(ctx); lerr == nil {
		for _, q := range qs {
			names = append(names, q.Name)
		}
	}
	if ts, lerr := b.ListTopics(ctx); lerr == nil {
		for _, t := range ts {
			names = append(names, t.Name)
		}
	}
	if near := closest(unquote(m[1]), names); len(near) > 0 {
		return suggested{err, quoteAll(near)}
	}
	return err
}

// unquote reads the body of a Go-quoted string, or returns it as it is.
func unquote(s string) string {
	if out, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return out
	}
	return s
}
