package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Environment variables the relay reads its secrets from, when no flag
// names them: a command line shows in ps, the environment and files do not.
const (
	envWebhookSecret = "MQLITE_WEBHOOK_SECRET"
	envAMQPURL       = "MQLITE_AMQP_URL"
)

// resolveSecrets fills the relay's secrets from --secret-file and
// --amqp-url-file, or else from the environment: a flag given on the
// command line wins over the environment. A file holds the value alone
// (--secret-file: one secret per line, for a rotation); surrounding space
// and blank lines do not count.
func (f *relayFlags) resolveSecrets(fs *pflag.FlagSet, getenv func(string) string) error {
	for _, path := range f.secretFiles {
		words, err := secretFile("--secret-file", path)
		if err != nil {
			return err
		}
		f.secrets = append(f.secrets, words...)
	}
	if !fs.Changed("secret") && !fs.Changed("secret-file") {
		f.secrets = strings.Fields(getenv(envWebhookSecret))
	}
	switch {
	case fs.Changed("amqp-url") && fs.Changed("amqp-url-file"):
		return usagef("give --amqp-url or --amqp-url-file, not both")
	case fs.Changed("amqp-url-file"):
		words, err := secretFile("--amqp-url-file", f.amqpURLFile)
		if err != nil {
			return err
		}
		if len(words) != 1 {
			return usagef("--amqp-url-file %s: want one URL, found %d words", f.amqpURLFile, len(words))
		}
		f.amqpURL = words[0]
	case !fs.Changed("amqp-url"):
		f.amqpURL = strings.TrimSpace(getenv(envAMQPURL))
	}
	return nil
}

// secretFile reads the words of the secret file path names (the file of
// flag). An error never quotes the file's content.
func secretFile(flag, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	words := strings.Fields(string(b))
	if len(words) == 0 {
		return nil, usagef("%s %s is empty", flag, path)
	}
	return words, nil
}
