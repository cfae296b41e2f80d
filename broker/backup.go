package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// backup writes a backup into Config.BackupDir, under the plain file name
// the request gives. The host's paths and errors stay off the wire (an
// error's cause goes to the log): a key learns nothing of the host's files.
func (s *Server) backup(r *http.Request) (result, error) {
	req, err := decode[wire.BackupRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := requireAll(r.Context()); err != nil {
		return result{}, err
	}
	if s.cfg.BackupDir == "" {
		return result{}, &apiError{wire.CodeForbidden, wire.ReasonBackupDisabled,
			"remote backups are off: start the broker with a backup folder (mqlite serve --backup-dir)"}
	}
	name := req.Path
	if !filepath.IsLocal(name) || name != filepath.Base(name) || name == "." || strings.ContainsAny(name, `/\`) {
		return result{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
			Detail: fmt.Sprintf("path %s: want a plain file name in the broker's backup folder", wire.Quote(name))}
	}
	err = s.st.Backup(r.Context(), filepath.Join(s.cfg.BackupDir, name))
	switch {
	case err == nil:
		return ok(req)
	case errors.Is(err, mqlite.ErrDestinationExists):
		return result{}, fmt.Errorf("%w: %s", mqlite.ErrDestinationExists, wire.Quote(name))
	case errors.Is(err, mqlite.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return result{}, err
	}
	s.log.Error("broker: backup failed", "name", name, "dir", s.cfg.BackupDir, "err", err)
	return result{}, &apiError{wire.CodeInternal, wire.ReasonInternal, "backup failed; the broker's log says why"}
}
