package relay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The properties of a record an Intake held aside in its hold queue
// (IntakeConfig.HoldQueue). The record's body is the message's body, its
// subject and group the message's when valid, its other properties the
// message's that are valid UTF-8, as many as fit; its MessageID is
// "held:" and the hex SHA-256 of the message's id and body, the same on
// every delivery of the message, so that the hold queue's dedup window
// drops a delivery again.
const (
	// HeaderHeldReason says why the queue refused the message:
	// HeldNoMessageID, HeldInvalid, HeldTooLarge or HeldConflict.
	HeaderHeldReason = "mqlite-held-reason"
	// HeaderHeldID is the message's id at the source, as is when it is
	// UTF-8 of at most mqlite.MaxMessageIDLen bytes, else Go-quoted and
	// cut to that length; absent when it had none.
	HeaderHeldID = "mqlite-held-id"
	// HeaderHeldOrigin is Inbound.Origin: where the far side keeps it.
	HeaderHeldOrigin = "mqlite-held-origin"
	// HeaderHeldBodyBytes is the size of a body left out of the record
	// because the message is over the store's Config.MaxMessageBytes;
	// absent when the record has the body.
	HeaderHeldBodyBytes = "mqlite-held-body-bytes"
	// HeaderHeldDropped counts the properties, subject and group left out
	// of the record (not UTF-8, over a limit); absent when none was.
	HeaderHeldDropped = "mqlite-held-dropped"
)

// The values of HeaderHeldReason.
const (
	HeldNoMessageID = "no_message_id"
	HeldInvalid     = "invalid_message"
	HeldTooLarge    = "message_too_large"
	HeldConflict    = "duplicate_conflict"
)

// HeldReasonOf is the HeaderHeldReason of a message the queue refused
// with err.
func HeldReasonOf(err error) string {
	switch {
	case errors.Is(err, ErrNoMessageID):
		return HeldNoMessageID
	case errors.Is(err, mqlite.ErrMessageTooLarge):
		return HeldTooLarge
	case errors.Is(err, mqlite.ErrDuplicateConflict):
		return HeldConflict
	}
	return HeldInvalid
}

// AsideSource is a Source that can keep on its own side a message the
// intake held aside without its body (over the store's
// Config.MaxMessageBytes): the intake calls SetAside for those, after the
// commit, in place of Ack. relay/amqp's Source rejects them without
// requeue, to the queue's dead-letter exchange when it has one.
type AsideSource interface {
	Source
	// SetAside settles msgs, which the intake held aside without their
	// bodies, so that the far side keeps them out of the way.
	SetAside(ctx context.Context, msgs []Inbound) error
}

// holdAside sends the held record of each message of msgs whose aside is
// set into the hold queue, inside tx, and marks in cut those whose record
// left the body out.
func (in *Intake) holdAside(tx *mqlite.Tx, msgs []Inbound, aside []error, cut []bool) error {
	for i, m := range msgs {
		if aside[i] == nil {
			continue
		}
		rec := heldRecord(m, aside[i])
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), in.cfg.HoldQueue, rec)
		if errors.Is(err, mqlite.ErrMessageTooLarge) && len(rec.Body) > 0 {
			// Over the store's limit even held: keep what says where
			// the far side has it, and its size.
			rec.Properties[HeaderHeldBodyBytes] = strconv.Itoa(len(rec.Body))
			rec.Body = nil
			_, err = outbox.SendOne(tx.Context(), tx.SQL(), in.cfg.HoldQueue, rec)
			cut[i] = true
		}
		if err != nil {
			// Not errRefused: a hold queue that cannot take the record
			// is retried, never taken one message at a time for ever.
			return fmt.Errorf("holding message %d aside in %s: %w", i, in.cfg.HoldQueue, errors.Join(err, errHoldQueue))
		}
	}
	return nil
}

// errHoldQueue marks a failure to hold a message aside, which is not the
// message's refusal.
var errHoldQueue = errors.New("the hold queue did not take the record")

// heldRecord is what the hold queue keeps of m, which the queue refused
// with why: valid by construction, so that only its size can be refused.
func heldRecord(m Inbound, why error) outbox.Message {
	sum := sha256.New()
	sum.Write([]byte(strconv.Itoa(len(m.MessageID))))
	sum.Write([]byte{0})
	sum.Write([]byte(m.MessageID))
	sum.Write(m.Body)
	props := map[string]string{HeaderHeldReason: HeldReasonOf(why)}
	if m.MessageID != "" {
		props[HeaderHeldID] = heldID(m.MessageID)
	}
	if m.Origin != "" {
		props[HeaderHeldOrigin] = clip(strings.ToValidUTF8(m.Origin, "\uFFFD"), mqlite.MaxSubjectLen)
	}
	rec := outbox.Message{Body: m.Body, MessageID: "held:" + hex.EncodeToString(sum.Sum(nil)), Properties: props}
	dropped := 0
	if ok(m.Subject, mqlite.MaxSubjectLen) {
		rec.Subject = m.Subject
	} else {
		dropped++
	}
	if ok(m.GroupID, mqlite.MaxGroupIDLen) {
		rec.GroupID = m.GroupID
	} else {
		dropped++
	}
	budget := mqlite.MaxPropertiesBytes - 4<<10 // room for the mqlite-held-* ones
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		v := m.Properties[k]
		if _, mine := props[k]; mine || !utf8.ValidString(k) || !utf8.ValidString(v) || len(k)+len(v) > budget {
			dropped++
			continue
		}
		budget -= len(k) + len(v)
		props[k] = v
	}
	if dropped > 0 {
		props[HeaderHeldDropped] = strconv.Itoa(dropped)
	}
	return rec
}

// heldID is id as the log and HeaderHeldID show it: as is when it is a
// valid MessageID, else Go-quoted and cut to mqlite.MaxMessageIDLen bytes.
func heldID(id string) string {
	if ok(id, mqlite.MaxMessageIDLen) {
		return id
	}
	return clip(strconv.Quote(id), mqlite.MaxMessageIDLen)
}

// ok reports whether s is UTF-8 of at most n bytes.
func ok(s string, n int) bool { return len(s) <= n && utf8.ValidString(s) }

// clip cuts s, which is UTF-8, to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
