package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Environment variables the relay reads its secrets from, when no flag
// names them: a command line shows in ps, the environment and files do not.
// The webhook's URL is one of them: an endpoint often keeps its token in
// its path or query.
const (
	envWebhookSecret = "MQLITE_WEBHOOK_SECRET"
	envWebhookURL    = "MQLITE_WEBHOOK_URL"
	envAMQPURL       = "MQLITE_AMQP_URL"
)

// resolveSecrets fills the relay's secrets from --secret-file,
// --webhook-url-file and --amqp-url-file, or else from the environment: a
// flag given on the command line wins over the environment. A file holds
// the value alone (--secret-file: one secret per line, for a rotation);
// surrounding space and blank lines do not count.
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
	if err := oneSecret(fs, "webhook-url", f.webhookURLFile, envWebhookURL, getenv, &f.url); err != nil {
		return err
	}
	return oneSecret(fs, "amqp-url", f.amqpURLFile, envAMQPURL, getenv, &f.amqpURL)
}

// oneSecret fills *v, the value of --flag, from the file of --flag-file
// (one word) or else, when neither flag is given, from the environment
// variable env.
func oneSecret(fs *pflag.FlagSet, flag, file, env string, getenv func(string) string, v *string) error {
	switch {
	case fs.Changed(flag) && fs.Changed(flag+"-file"):
		return usagef("give --%s or --%s-file, not both", flag, flag)
	case fs.Changed(flag + "-file"):
		words, err := secretFile("--"+flag+"-file", file)
		if err != nil {
			return err
		}
		if len(words) != 1 {
			return usagef("--%s-file %s: want one value, found %d words", flag, file, len(words))
		}
		*v = words[0]
	case !fs.Changed(flag):
		*v = strings.TrimSpace(getenv(env))
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
