package driver

// Schedule is one row of the schedules table: what to send, where, and the
// state of its periods. Times are epoch milliseconds.
type Schedule struct {
	Name       string
	Target     string // a queue or a topic
	Cron       string // "" for an interval schedule
	TimeZone   string // the cron's time zone; "" is UTC
	IntervalMS int64  // 0 for a cron schedule
	AnchorAt   int64  // interval: the grid's origin; cron: no period before it (0: none)
	CatchUp    int64  // at most this many periods fire in one go
	Body       []byte
	GroupID    string
	Subject    string
	Properties string // JSON object, "" = none
	TTLMS      int64
	NextAt     int64 // the start of the first period not fired yet
	LastAt     int64 // the start of the last period fired; 0 for none
	LastError  string
	Fired      int64 // periods fired
	Skipped    int64 // periods skipped by the catch-up bound
	CreatedAt  int64
	UpdatedAt  int64
}

// Size is what a schedule weighs in a listing: its message's body and
// metadata, its name and target. The engine's listing computes the same.
func (r Schedule) Size() int64 {
	return int64(len(r.Name) + len(r.Target) + len(r.Cron) + len(r.TimeZone) + len(r.Body) + len(r.GroupID) +
		len(r.Subject) + len(r.Properties) + len(r.LastError))
}

// Advance is what one firing did to a schedule.
type Advance struct {
	NextAt    int64 // the new start of the first period not fired
	LastAt    int64 // the last period fired; 0 keeps the current one
	Fired     int64 // periods fired now
	Skipped   int64 // periods skipped now
	LastError string
}
