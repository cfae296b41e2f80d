package driver

import "strings"

// Queue is one row of the queues table, durations in milliseconds.
type Queue struct {
	Name               string
	FIFO               bool
	MaxDeliveryCount   int64
	LockDurationMS     int64
	DedupWindowMS      int64
	DefaultTTLMS       int64
	DeadLetterOnExpire bool
	DLQMaxAgeMS        int64 // 0 = unbounded
	DLQMaxCount        int64 // 0 = unbounded
	DLQMaxBytes        int64 // 0 = unbounded
	DedupByBody        bool
	CreatedAt          int64
	UpdatedAt          int64
	PausedAt           int64 // epoch ms; 0 while the queue runs
}

// Filter picks the messages of a topic a subscription receives. The zero
// Filter takes every message.
type Filter struct {
	Subject       string           `json:"subject,omitempty"`
	SubjectPrefix string           `json:"subject_prefix,omitempty"`
	Properties    map[string]Match `json:"properties,omitempty"`
}

// Match is one condition on a property: its value is one of In, or starts
// with Prefix. A message without the property does not match.
type Match struct {
	In     []string `json:"in,omitempty"`
	Prefix string   `json:"prefix,omitempty"`
}

// Matches reports whether a message with subject and props passes f.
func (f Filter) Matches(subject string, props map[string]string) bool {
	if f.Subject != "" && subject != f.Subject {
		return false
	}
	if f.SubjectPrefix != "" && !strings.HasPrefix(subject, f.SubjectPrefix) {
		return false
	}
	for key, m := range f.Properties {
		v, ok := props[key]
		if !ok {
			return false
		}
		if len(m.In) > 0 && !contains(m.In, v) {
			return false
		}
		if m.Prefix != "" && !strings.HasPrefix(v, m.Prefix) {
			return false
		}
	}
	return true
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// Topic is one row of the topics table with its subscriptions.
type Topic struct {
	Name          string
	CreatedAt     int64
	Subscriptions []Subscription
}

// Subscription is one row of the subscriptions table: the queue that gets
// a copy of each message of the topic that passes the filter.
type Subscription struct {
	Topic     string
	Queue     string
	Filter    Filter
	CreatedAt int64
}
