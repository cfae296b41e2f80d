package broker

import (
	"fmt"
	"io"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// MaxLockTokenBytes bounds a lock token a request names: the store hands
// out tokens of 32 hex digits, so a longer one is no token. It is refused
// (400 invalid, mqlite.ErrInvalidArgument) before anything is read into
// the store or held for a commit; a shorter one is a lost lock (409).
const MaxLockTokenBytes = 32

// checkTokens refuses a token longer than MaxLockTokenBytes.
func checkTokens(tokens ...string) error {
	for _, t := range tokens {
		if len(t) > MaxLockTokenBytes {
			return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
				Detail: fmt.Sprintf("a lock token of %d bytes, at most %d", len(t), MaxLockTokenBytes)}
		}
	}
	return nil
}

// checkLockTokens is checkTokens on the tokens of locks.
func checkLockTokens(locks []wire.LockRequest) error {
	for _, l := range locks {
		if err := checkTokens(l.Token); err != nil {
			return err
		}
	}
	return nil
}

// checkStreamTokens is checkTokens on the tokens of a stream's line.
func checkStreamTokens(l wire.StreamSettle) error {
	if err := checkLockTokens(l.Complete); err != nil {
		return err
	}
	for _, a := range l.Abandon {
		if err := checkTokens(a.Token); err != nil {
			return err
		}
	}
	for _, r := range l.Reject {
		if err := checkTokens(r.Token); err != nil {
			return err
		}
	}
	return nil
}

// decodeLock decodes a request body of one lock, and checks its token.
func decodeLock(body io.Reader) (wire.LockRequest, error) {
	req, err := decode[wire.LockRequest](body)
	if err == nil {
		err = checkTokens(req.Token)
	}
	return req, err
}
