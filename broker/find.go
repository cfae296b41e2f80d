package broker

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// findParams are the query parameters of GET /v1/queues/{queue}/find.
var findParams = map[string]bool{"from_seq": true, "max": true, "max_bytes": true, "scan_max": true,
	"state": true, "subject_prefix": true, "message_id": true, "property_key": true, "property_value": true}

// findOptions decodes the query of a find: an unknown or repeated
// parameter, or an integer that does not parse, is refused; the store
// checks the values (bounds, UTF-8).
func findOptions(q url.Values) (mqlite.FindParams, error) {
	var o mqlite.FindParams
	for name, vs := range q {
		if !findParams[name] {
			return o, errMalformed("unknown query parameter %s", wire.Quote(name))
		}
		if len(vs) != 1 {
			return o, errMalformed("query parameter %s given %d times", name, len(vs))
		}
	}
	for _, f := range []struct {
		name string
		set  func(int64)
	}{
		{"from_seq", func(v int64) { o.FromSeq = v }},
		{"max", func(v int64) { o.Max = int(max(min(v, 1<<30), -1)) }},
		{"max_bytes", func(v int64) { o.MaxBytes = v }},
		{"scan_max", func(v int64) { o.ScanMax = int(max(min(v, 1<<30), -1)) }},
	} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return o, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: f.name + " is not an integer"}
			}
			f.set(n)
		}
	}
	o.State = mqlite.State(q.Get("state"))
	o.SubjectPrefix, o.MessageID = q.Get("subject_prefix"), q.Get("message_id")
	o.PropertyKey, o.PropertyValue = q.Get("property_key"), q.Get("property_value")
	return o, nil
}

// find answers GET /v1/queues/{queue}/find: a consumer key, an admin one
// for the dead letters (as their listing).
func (s *Server) find(r *http.Request) (result, error) {
	opts, err := findOptions(r.URL.Query())
	if err != nil {
		return result{}, err
	}
	queue := r.PathValue("queue")
	if opts.State == mqlite.StateDeadLettered {
		if err := require(r.Context(), keys.Admin, queue); err != nil {
			return result{}, err
		}
	}
	if opts.MaxBytes, err = s.budget(opts.MaxBytes); err != nil {
		return result{}, err
	}
	res, err := s.st.Find(r.Context(), queue, opts)
	if err != nil {
		return result{}, err
	}
	return ok(wire.FindResponse{Messages: wire.FromMessages(res.Messages), NextSeq: res.NextSeq, Scanned: res.Scanned})
}
