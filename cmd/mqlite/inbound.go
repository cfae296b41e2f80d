package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite/inbound"
)

// envInboundSecretPrefix starts the environment variable of an inbound
// sender's secrets when no --inbound-secret-file names them: the sender's
// name in capitals, '.' and '-' as '_' (sender stripe-live:
// MQLITE_INBOUND_SECRET_STRIPE_LIVE). Several secrets (a rotation) are
// separated by spaces.
const envInboundSecretPrefix = "MQLITE_INBOUND_SECRET_"

// inboundFlags are serve's flags of the signed webhooks it takes in.
type inboundFlags struct {
	senders, secretFiles []string
	tolerance, horizon   time.Duration
	maxBody, maxHeld     int64 // maxBody 0: the store's limit less inbound.MetadataRoom
	maxHeldSource        int64 // 0: a quarter of maxHeld
}

func (f *inboundFlags) add(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.senders, "inbound", nil, "take the signed webhooks of POST /v1/inbound/`NAME=QUEUE` into QUEUE (repeatable); secrets from --inbound-secret-file or "+envInboundSecretPrefix+"NAME")
	fs.StringArrayVar(&f.secretFiles, "inbound-secret-file", nil, "the whsec_ secrets of an inbound sender, one per line: `NAME=FILE` (repeatable)")
	fs.DurationVar(&f.tolerance, "inbound-tolerance", inbound.DefaultTolerance, "how far an inbound webhook's timestamp may be from now")
	fs.DurationVar(&f.horizon, "inbound-retry-horizon", inbound.DefaultRetryHorizon, "how long the inbound senders' providers retry a webhook (the common ones: days): their queues' dedup window must cover it")
	fs.Int64Var(&f.maxBody, "inbound-max-body", 0, fmt.Sprintf("the largest inbound webhook body, in bytes (default --max-message-bytes less %d, the room of its id and Content-Type)", inbound.MetadataRoom))
	fs.Int64Var(&f.maxHeld, "inbound-max-held", inbound.DefaultMaxHeldBytes, "the bytes of inbound webhook bodies held at once; past it a webhook is 503 with Retry-After, its body unread")
	fs.Int64Var(&f.maxHeldSource, "inbound-max-held-per-source", 0, "the bytes of one inbound sender's bodies held at once (default a quarter of --inbound-max-held, at least --inbound-max-body)")
}

// resolve returns the senders the flags name, each with its secrets: from
// its --inbound-secret-file, or else from its environment variable. A
// secret is never taken from the command line, where ps shows it.
func (f *inboundFlags) resolve(getenv func(string) string) ([]inbound.Sender, error) {
	files := map[string]string{}
	for _, spec := range f.secretFiles {
		name, path, ok := strings.Cut(spec, "=")
		if !ok || name == "" || path == "" {
			return nil, usagef("--inbound-secret-file %q: want NAME=FILE", spec)
		}
		files[name] = path
	}
	var out []inbound.Sender
	for _, spec := range f.senders {
		name, queue, ok := strings.Cut(spec, "=")
		if !ok || name == "" || queue == "" {
			return nil, usagef("--inbound %q: want NAME=QUEUE", spec)
		}
		src := inbound.Sender{Name: name, Queue: queue, Tolerance: f.tolerance, RetryHorizon: f.horizon, MaxBodyBytes: f.maxBody, MaxHeldBytes: f.maxHeldSource}
		if path, ok := files[name]; ok {
			words, err := secretFile("--inbound-secret-file", path)
			if err != nil {
				return nil, err
			}
			src.Secrets = words
			delete(files, name)
		} else {
			env := envInboundSecretPrefix + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(name))
			if src.Secrets = strings.Fields(getenv(env)); len(src.Secrets) == 0 {
				return nil, usagef("--inbound %s: no secret: give --inbound-secret-file %s=FILE or set %s", name, name, env)
			}
		}
		out = append(out, src)
	}
	for name := range files {
		return nil, usagef("--inbound-secret-file %s=...: no --inbound %s=QUEUE", name, name)
	}
	return out, nil
}
