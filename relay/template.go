package relay

import (
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/mqlite/mqlite"
)

// Template names where a message goes (a NATS subject, an AMQP routing
// key): a text/template over TemplateData, such as "orders.{{.Subject}}".
// It is safe for concurrent use.
type Template struct {
	tmpl    *template.Template
	literal string // the whole output when the text has no actions
}

// TemplateData is the data a Template renders.
type TemplateData struct {
	Queue      string
	Subject    string // the message's Subject
	GroupID    string
	ID         string // ID(m)
	Properties map[string]string
}

// ParseTemplate parses text. An empty text is an error (matching
// mqlite.ErrInvalidArgument).
func ParseTemplate(text string) (*Template, error) {
	if text == "" {
		return nil, invalid("empty template")
	}
	t, err := template.New("route").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, invalid("template %q: %v", text, err)
	}
	if !strings.Contains(text, "{{") {
		return &Template{literal: text}, nil
	}
	return &Template{tmpl: t}, nil
}

// Render renders the template for m.
func (t *Template) Render(m mqlite.Message) (string, error) {
	if t.tmpl == nil {
		return t.literal, nil
	}
	var b strings.Builder
	err := t.tmpl.Execute(&b, TemplateData{Queue: m.Queue, Subject: m.Subject, GroupID: m.GroupID, ID: ID(m), Properties: m.Properties})
	if err != nil {
		return "", fmt.Errorf("relay: render %s: %w", t.tmpl.Root.String(), err)
	}
	return b.String(), nil
}

// HoldTemplate is the reason of the hold of a message that a sink's route
// template cannot render, or renders into no valid destination (a subject
// "orders." for a message without a Subject). It is the operator's error
// and not the message's: no retry cures it and no dead letter should record
// it, but a relay started with a template that renders the message does.
const HoldTemplate = "template"

// ErrNoRoute is the cause of every Unrenderable outcome.
var ErrNoRoute = errors.New("relay: the route template renders no valid destination for the message")

// Unrenderable is the outcome of a message the sink's route template cannot
// route (err says why): a Hold with reason HoldTemplate, whose Err matches
// ErrNoRoute and err. The relay keeps the message, says so once, and gives
// it back when it stops; the other messages of the batch go on as their
// outcomes say.
func Unrenderable(err error) Outcome {
	return Hold(HoldTemplate, fmt.Errorf("%w: %w", ErrNoRoute, err))
}
