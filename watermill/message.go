package watermill

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// toOutbox turns a Watermill message into an outbox message: UUID →
// MessageID, payload → Body, metadata → Properties, GroupIDFunc → GroupID.
func toOutbox(topic string, m *message.Message, group GroupIDFunc) (outbox.Message, error) {
	if m == nil {
		return outbox.Message{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidMessage, Detail: "nil message"}
	}
	if m.UUID == "" {
		// With no MessageID mqlite de-duplicates by the body's hash: two
		// different messages with the same payload would collapse into one.
		return outbox.Message{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidMessage, Detail: "empty UUID"}
	}
	om := outbox.Message{
		Body:      m.Payload,
		MessageID: m.UUID,
	}
	if om.Body == nil {
		om.Body = []byte{}
	}
	if len(m.Metadata) > 0 {
		om.Properties = maps.Clone(map[string]string(m.Metadata))
	}
	if group != nil {
		om.GroupID = group(topic, m)
	}
	return om, nil
}

// fromMqlite turns a received mqlite message into a Watermill message. A
// message sent without a MessageID (by outbox.SendOne directly) gets
// "<queue>:<seq>", its stable id outside the store.
func fromMqlite(m mqlite.Message) *message.Message {
	id := m.MessageID
	if id == "" {
		id = m.Queue + ":" + strconv.FormatInt(m.Seq, 10)
	}
	wm := message.NewMessage(id, m.Body)
	for k, v := range m.Properties {
		wm.Metadata.Set(k, v)
	}
	return wm
}

// invalid returns an error matching mqlite.ErrInvalidArgument.
func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: fmt.Sprintf(format, args...)}
}
