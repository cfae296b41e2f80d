package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// Find returns a page of the queue's messages that match opts, as
// Store.Find. The dead letters (State StateDeadLettered) need an admin key.
func (c *Client) Find(ctx context.Context, queue string, opts mqlite.FindParams) (mqlite.FindResult, error) {
	if err := checkQueue(queue); err != nil {
		return mqlite.FindResult{}, err
	}
	q := url.Values{}
	for name, v := range map[string]int64{"from_seq": opts.FromSeq, "max": int64(opts.Max),
		"max_bytes": opts.MaxBytes, "scan_max": int64(opts.ScanMax)} {
		if v != 0 {
			q.Set(name, strconv.FormatInt(v, 10))
		}
	}
	for name, v := range map[string]string{"state": string(opts.State), "subject_prefix": opts.SubjectPrefix,
		"message_id": opts.MessageID, "property_key": opts.PropertyKey, "property_value": opts.PropertyValue} {
		if v != "" {
			q.Set(name, v)
		}
	}
	var out wire.FindResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: qpath(queue, "/find?"+q.Encode()), out: &out}); err != nil {
		return mqlite.FindResult{}, err
	}
	return mqlite.FindResult{Messages: wire.Messages(out.Messages), NextSeq: out.NextSeq, Scanned: out.Scanned}, nil
}
