package client

import (
	"context"
	"net/http"

	"github.com/mqlite/mqlite/internal/wire"
)

// Backup writes a backup of the store, as Store.Backup, into the broker's
// backup folder (mqlite serve --backup-dir) under name, a plain file name
// that must not exist there (mqlite.ErrDestinationExists). A path is
// mqlite.ErrInvalidArgument; a broker started without a backup folder
// refuses with ErrForbidden. Needs an admin key over every queue.
func (c *Client) Backup(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/backup", in: wire.BackupRequest{Path: name}})
}
