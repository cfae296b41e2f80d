package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRelaySecretsFromFilesAndEnvironment: the webhook's secrets and the
// AMQP and webhook URLs come from a file or the environment, so that ps does not show
// them; a flag given on the command line wins over the environment.
func TestRelaySecretsFromFilesAndEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secrets := write("secrets", "whsec_file1\n\nwhsec_file2\n")
	amqpURL := write("amqp", "amqp://user:pass@127.0.0.1:5672/\n")
	hookURL := write("hook", "https://hooks.example/in?token=pass@file\n")
	empty := write("empty", " \n")
	env := map[string]string{envWebhookSecret: "whsec_env1 whsec_env2", envAMQPURL: "amqp://env:pass@127.0.0.1:5672/",
		envWebhookURL: "https://hooks.example/in?token=env"}
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		wantSecrets []string
		wantAMQP    string
		wantHook    string
		wantUsage   bool
	}{
		{"the environment", nil, env, []string{"whsec_env1", "whsec_env2"}, "amqp://env:pass@127.0.0.1:5672/", "https://hooks.example/in?token=env", false},
		{"files win over the environment", []string{"--secret-file", secrets, "--amqp-url-file", amqpURL, "--webhook-url-file", hookURL}, env,
			[]string{"whsec_file1", "whsec_file2"}, "amqp://user:pass@127.0.0.1:5672/", "https://hooks.example/in?token=pass@file", false},
		{"flags win over the environment", []string{"--secret", "whsec_flag", "--amqp-url", "amqp://flag@h/", "--webhook-url", "http://flag/"}, env,
			[]string{"whsec_flag"}, "amqp://flag@h/", "http://flag/", false},
		{"a flag and a file add up", []string{"--secret", "whsec_flag", "--secret-file", secrets}, nil,
			[]string{"whsec_flag", "whsec_file1", "whsec_file2"}, "", "", false},
		{"nothing anywhere", nil, nil, nil, "", "", false},
		{"a missing file", []string{"--secret-file", filepath.Join(dir, "none")}, env, nil, "", "", true},
		{"an empty file", []string{"--amqp-url-file", empty}, env, nil, "", "", true},
		{"an empty URL file", []string{"--webhook-url-file", empty}, env, nil, "", "", true},
		{"the URL twice", []string{"--amqp-url", "amqp://h/", "--amqp-url-file", amqpURL}, nil, nil, "", "", true},
		{"the webhook URL twice", []string{"--webhook-url", "http://h/", "--webhook-url-file", hookURL}, nil, nil, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := relayCmd(&globals{})
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var f relayFlags
			f.secrets, _ = cmd.Flags().GetStringArray("secret")
			f.secretFiles, _ = cmd.Flags().GetStringArray("secret-file")
			f.amqpURL, _ = cmd.Flags().GetString("amqp-url")
			f.amqpURLFile, _ = cmd.Flags().GetString("amqp-url-file")
			f.url, _ = cmd.Flags().GetString("webhook-url")
			f.webhookURLFile, _ = cmd.Flags().GetString("webhook-url-file")
			err := f.resolveSecrets(cmd.Flags(), func(k string) string { return tc.env[k] })
			var ue usageError
			if tc.wantUsage {
				if !errors.As(err, &ue) {
					t.Fatalf("err %v, want a usage error", err)
				}
				if strings.Contains(err.Error(), "pass@") {
					t.Fatalf("the error shows the file's content: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.secrets, tc.wantSecrets) || f.amqpURL != tc.wantAMQP || f.url != tc.wantHook {
				t.Fatalf("secrets %q, AMQP URL %q, webhook URL %q; want %q, %q, %q", f.secrets, f.amqpURL, f.url, tc.wantSecrets, tc.wantAMQP, tc.wantHook)
			}
		})
	}
}
