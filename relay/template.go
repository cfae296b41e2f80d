package relay

import (
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
