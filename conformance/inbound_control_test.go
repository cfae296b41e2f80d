package conformance_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/conformance"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/outbox"
)

// inboundMutantEnv tells TestConformanceInboundMutant, in the child
// process TestInboundControl starts, to run the Inbound area against a
// handler that stores before it verifies.
const inboundMutantEnv = "MQLITE_INBOUND_MUTANT"

// TestInboundControl shows the Inbound area can fail: run in a child
// process against a handler that stores each body under its webhook-id
// before the signature is checked, Inbound/BadSignatureWritesNothing fails.
func TestInboundControl(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformanceInboundMutant$/^Inbound$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inboundMutantEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestConformanceInboundMutant/Inbound/BadSignatureWritesNothing ") {
		t.Fatalf("Inbound/BadSignatureWritesNothing did not fail with a handler that stores before it verifies (err %v):\n%s", err, out)
	}
}

// TestConformanceInboundMutant runs the kit with the storing-first handler,
// when TestInboundControl asks; it is skipped otherwise.
func TestConformanceInboundMutant(t *testing.T) {
	t.Parallel()
	if os.Getenv(inboundMutantEnv) == "" {
		t.Skip("TestInboundControl runs it against a mutant")
	}
	h := embedded(viaStoreTx, effectsViaStoreTx)
	open := h.Open
	h.Open = func(t *testing.T, cfg conformance.Config) conformance.Instance {
		in := open(t, cfg)
		real := in.Inbound
		st := in.Store.(*mqlite.Store)
		in.Inbound = func(t *testing.T, sources []inbound.Sender) (http.Handler, error) {
			hd, err := real(t, sources)
			if err != nil {
				return nil, err
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				_, _ = outbox.SendOne(context.Background(), st.DB(), sources[0].Queue,
					outbox.Message{Body: body, MessageID: r.Header.Get("webhook-id")})
				r.Body = io.NopCloser(bytes.NewReader(body))
				hd.ServeHTTP(w, r)
			}), nil
		}
		return in
	}
	conformance.Run(t, h)
}
