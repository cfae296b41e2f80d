package broker

import (
	"net/http"
	"net/url"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// findParams are the query parameters of GET /v1/queues/{queue}/find.
var findParams = map[string]bool{"from_seq": true, "max": true, "max_bytes": true, "scan_max": true,
	"state": true, "subject_prefix": true, "message_id": true, "property_key": true, "property_value": true}

// peekParams are the query parameters of a peek and of the dead-letter
// listing.
var peekParams = map[string]bool{"from_seq": true, "max": true, "max_bytes": true}

// checkParams refuses a query with a parameter not in allowed, or one given
// more than once: a browse never guesses which of two values was meant.
func checkParams(q url.Values, allowed map[string]bool) error {
	for name, vs := range q {
		if !allowed[name] {
			return errMalformed("unknown query parameter %s", wire.Quote(name))
		}
		if len(vs) != 1 {
			return errMalformed("query parameter %s given %d times", name, len(vs))
		}
	}
	return nil
}

// decodePeekQuery decodes the query of a peek or of the dead-letter
// listing as findOptions does a find's.
func decodePeekQuery(q url.Values) (mqlite.PeekParams, error) {
	var o mqlite.PeekParams
	if err := checkParams(q, peekParams); err != nil {
		return o, err
	}
	err := intParams(q, map[string]func(int64){
		"from_seq":  func(v int64) { o.FromSeq = v },
		"max":       func(v int64) { o.Max = int(max(min(v, 1<<30), -1)) },
		"max_bytes": func(v int64) { o.MaxBytes = v },
	})
	return o, err
}

// findOptions decodes the query of a find: an unknown or repeated
// parameter, or an integer that does not parse, is refused; the store
// checks the values (bounds, UTF-8).
func findOptions(q url.Values) (mqlite.FindParams, error) {
	var o mqlite.FindParams
	if err := checkParams(q, findParams); err != nil {
		return o, err
	}
	err := intParams(q, map[string]func(int64){
		"from_seq":  func(v int64) { o.FromSeq = v },
		"max":       func(v int64) { o.Max = int(max(min(v, 1<<30), -1)) },
		"max_bytes": func(v int64) { o.MaxBytes = v },
		"scan_max":  func(v int64) { o.ScanMax = int(max(min(v, 1<<30), -1)) },
	})
	if err != nil {
		return o, err
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
