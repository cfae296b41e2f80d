package consumer

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

// CompleteBatcher is a Source that can complete many deliveries in one
// commit. *mqlite.Store is one. When Loop's Source implements it, handlers
// that succeed hand their message to one completer goroutine and move on:
// completions that arrive while a commit is in progress go out together in
// the next, so concurrent handlers share commits instead of queueing for
// one each. An idle Loop still completes each message at once.
type CompleteBatcher interface {
	// CompleteBatch completes locks in one transaction; each lock gets its
	// own result (nil or an error matching mqlite.ErrLockLost), err is for
	// failures of the whole call.
	CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error)
}

var _ CompleteBatcher = (*mqlite.Store)(nil)

var errShortBatch = errors.New("consumer: CompleteBatch returned fewer results than locks")

// completion is a message whose handler succeeded, waiting to be completed.
type completion struct {
	msg  mqlite.Message
	took time.Duration
	span trace.Span // the process span, ended here; nil when tracing is off
}

// complete is the completer goroutine: it completes what the workers hand
// over, in batches of whatever has gathered, until l.completions is closed
// and drained. It frees each message's slot once the message is settled.
func (l *loop) complete(bc CompleteBatcher) {
	batch := make([]completion, 0, cap(l.completions))
	locks := make([]mqlite.Lock, 0, cap(l.completions))
	for c := range l.completions {
		batch, locks = append(batch[:0], c), append(locks[:0], c.msg.Lock())
	more:
		for len(batch) < mqlite.MaxReceiveBatch {
			select {
			case c, ok := <-l.completions:
				if !ok {
					break more
				}
				batch, locks = append(batch, c), append(locks, c.msg.Lock())
			default:
				break more
			}
		}
		l.completeBatch(bc, batch, locks)
		for range batch {
			l.slots <- struct{}{}
		}
	}
}

// completeBatch settles one batch and reports each message's outcome. When
// the whole call fails, it completes the messages one by one, so each gets
// its own outcome.
func (l *loop) completeBatch(bc CompleteBatcher, batch []completion, locks []mqlite.Lock) {
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	sctx = settleParent(sctx, batch)
	res, err := bc.CompleteBatch(sctx, locks)
	if err == nil && len(res) != len(locks) {
		err = errShortBatch
	}
	for i, c := range batch {
		var serr error
		if err == nil {
			serr = res[i]
		} else {
			serr = l.src.Complete(sctx, locks[i])
		}
		if c.span != nil {
			tracing.End(c.span, serr)
		}
		if serr != nil {
			l.settleFailed(c.msg, "complete", serr)
			continue
		}
		l.o.Observer.Completed(c.msg, c.took)
	}
}
