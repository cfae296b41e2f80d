package wire

// BackupRequest is the body of a backup, and its response: the name of a
// file to create in the broker's backup folder (a plain name, not a path).
type BackupRequest struct {
	Path string `json:"path"`
}
