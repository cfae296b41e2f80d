package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// OpenAPIPath is where the broker serves its OpenAPI 3.1 document, to any
// caller (it holds no data): every route, the JSON of each request and
// answer, and every error code and reason. docs/openapi.json is a copy,
// kept equal by a test.
const OpenAPIPath = "/v1/openapi.json"

// operation documents one route of the broker for the OpenAPI document:
// the types of its request body and of its answer are the wire types the
// handler decodes and encodes, so their schemas come from the same Go
// fields.
type operation struct {
	summary string
	in      any      // a value of the request body's type; nil: no body
	out     any      // a value of the answer's type; nil: 204 No Content
	status  int      // the success status: 200, 201 or 204
	query   []string // query parameters: integers, or "name:string"
}

// operations documents every endpoint of routes, by pattern. A route
// without its operation fails the broker's OpenAPI test (and the document
// refuses to build), as does an operation without its route.
var operations = map[string]operation{
	"POST /v1/queues/{queue}/messages":         {"Send one message", wire.SendMessage{}, wire.SendResult{}, http.StatusCreated, nil},
	"POST /v1/queues/{queue}/messages/batch":   {"Send a batch of messages, each with its own result", wire.SendBatchRequest{}, wire.SendBatchResponse{}, http.StatusOK, nil},
	"GET /v1/queues/{queue}/messages":          {"Peek at messages without locking them", nil, wire.MessagesResponse{}, http.StatusOK, []string{"from_seq", "max", "max_bytes"}},
	"GET /v1/queues/{queue}/find":              {"Find messages by state, subject prefix, message id and property, scanning at most scan_max per page", nil, wire.FindResponse{}, http.StatusOK, []string{"from_seq", "max", "max_bytes", "scan_max", "state:string", "subject_prefix:string", "message_id:string", "property_key:string", "property_value:string"}},
	"POST /v1/queues/{queue}/receive":          {"Receive (peek-lock) messages, waiting up to wait_ms for the first", wire.ReceiveRequest{}, wire.MessagesResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/complete":         {"Complete a delivery", wire.LockRequest{}, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/complete-batch":   {"Complete many deliveries, each with its own result", wire.LocksRequest{}, wire.ResultsResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/complete-receive": {"Complete deliveries and receive the next messages in one commit", wire.CompleteReceiveRequest{}, wire.CompleteReceiveResponse{}, http.StatusOK, nil},
	commitPattern:                                     {"Complete, reject and send across queues in one transaction, all or nothing; replayed by idempotency_key (derived from the locks when absent)", wire.CommitRequest{}, wire.CommitResponse{}, http.StatusOK, nil},
	streamPattern:                                     {"Stream: messages out while fewer than window are unsettled, settlements in (newline-delimited JSON both ways)", wire.StreamSettle{}, wire.StreamEvent{}, http.StatusOK, []string{"window", "max_bytes"}},
	"POST /v1/queues/{queue}/abandon":                 {"Give a delivery back, to come again after delay_ms", wire.AbandonRequest{}, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/reject":                  {"Dead-letter a delivery with a reason", wire.RejectRequest{}, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/release":                 {"Give back a delivery never started: ready at once, not counted", wire.LockRequest{}, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/defer":                   {"Defer a delivery: it comes back only by its seq", wire.LockRequest{}, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/receive-deferred":        {"Receive a deferred message by its seq", wire.SeqRequest{}, wire.MessageResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/renew":                   {"Renew a delivery's lease", wire.LockRequest{}, wire.RenewResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/renew-batch":             {"Renew many leases, each with its own result", wire.LocksRequest{}, wire.ResultsResponse{}, http.StatusOK, nil},
	"GET /v1/queues/{queue}/stats":                    {"Count a queue's messages per state", nil, wire.Stats{}, http.StatusOK, nil},
	"GET /v1/queues/{queue}/dead-letters":             {"Peek at a queue's dead letters", nil, wire.MessagesResponse{}, http.StatusOK, []string{"from_seq", "max", "max_bytes"}},
	"POST /v1/queues/{queue}/deliver-now":             {"Make scheduled messages due now (all, or the seqs given)", wire.DeliverNowRequest{}, wire.CountResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/dead-letters/redrive":    {"Put dead letters back to active (all, or the seqs given)", wire.RedriveRequest{}, wire.CountResponse{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/purge":                   {"Delete every message of a queue in one state", wire.PurgeRequest{}, wire.CountResponse{}, http.StatusOK, nil},
	"GET /v1/queues":                                  {"List the queues the key covers", nil, wire.QueuesResponse{}, http.StatusOK, nil},
	"POST /v1/queues":                                 {"Create a queue", wire.CreateQueueRequest{}, wire.QueueInfo{}, http.StatusCreated, nil},
	"GET /v1/queues/{queue}":                          {"Read a queue's options", nil, wire.QueueInfo{}, http.StatusOK, nil},
	"PUT /v1/queues/{queue}":                          {"Replace a queue's options", wire.UpdateQueueRequest{}, wire.QueueInfo{}, http.StatusOK, nil},
	"DELETE /v1/queues/{queue}":                       {"Delete a queue and its messages", nil, nil, http.StatusNoContent, nil},
	"POST /v1/queues/{queue}/pause":                   {"Pause a queue: sends are accepted, receives claim nothing until it resumes", nil, wire.QueueInfo{}, http.StatusOK, nil},
	"POST /v1/queues/{queue}/resume":                  {"Resume a paused queue; the receives waiting claim at once", nil, wire.QueueInfo{}, http.StatusOK, nil},
	"GET /v1/topics":                                  {"List the topics the key covers", nil, wire.TopicsResponse{}, http.StatusOK, nil},
	"POST /v1/topics":                                 {"Create a topic", wire.CreateTopicRequest{}, wire.Topic{}, http.StatusCreated, nil},
	"GET /v1/topics/{topic}":                          {"Read a topic and its subscriptions", nil, wire.Topic{}, http.StatusOK, nil},
	"DELETE /v1/topics/{topic}":                       {"Delete a topic and its subscriptions", nil, nil, http.StatusNoContent, nil},
	"POST /v1/topics/{topic}/subscriptions":           {"Subscribe a new queue to a topic", wire.CreateSubscriptionRequest{}, wire.Topic{}, http.StatusCreated, nil},
	"PUT /v1/topics/{topic}/subscriptions/{queue}":    {"Replace a subscription's filter", wire.UpdateSubscriptionRequest{}, wire.Topic{}, http.StatusOK, nil},
	"DELETE /v1/topics/{topic}/subscriptions/{queue}": {"Remove a subscription and its queue", nil, nil, http.StatusNoContent, nil},
	"GET /v1/schedules":                               {"List the schedules, a page at a time (after: the last name of the previous page; max: at most this many, default 100; max_bytes: within this budget)", nil, wire.SchedulesResponse{}, http.StatusOK, []string{"after:string", "max", "max_bytes"}},
	"POST /v1/schedules":                              {"Create a schedule", wire.CreateScheduleRequest{}, wire.Schedule{}, http.StatusCreated, nil},
	"GET /v1/schedules/{schedule}":                    {"Read a schedule", nil, wire.Schedule{}, http.StatusOK, nil},
	"PUT /v1/schedules/{schedule}":                    {"Replace a schedule's options", wire.UpdateScheduleRequest{}, wire.Schedule{}, http.StatusOK, nil},
	"DELETE /v1/schedules/{schedule}":                 {"Delete a schedule", nil, nil, http.StatusNoContent, nil},
	"GET /v1/keys":                                    {"List the access keys (never their secrets)", nil, wire.KeysResponse{}, http.StatusOK, nil},
	"POST /v1/keys":                                   {"Create an access key; its secret is in this answer only", wire.CreateKeyRequest{}, wire.CreateKeyResponse{}, http.StatusCreated, nil},
	"DELETE /v1/keys/{id}":                            {"Revoke an access key", nil, nil, http.StatusNoContent, nil},
	"POST /v1/backup":                                 {"Write a consistent copy of the store into the broker's backup folder", wire.BackupRequest{}, wire.BackupRequest{}, http.StatusOK, nil},
	"GET /v1/whoami":                                  {"Describe the caller's key and the queues it covers", nil, wire.WhoAmIResponse{}, http.StatusOK, nil},
	"GET /v1/counts":                                  {"Count every covered queue's messages per state", nil, wire.CountsResponse{}, http.StatusOK, nil},
}

// openRoutes are the routes outside the endpoint table, served to callers
// without a key (GET /metrics needs an admin key unless
// Config.PublicMetrics): documented by hand.
var openRoutes = map[string]operation{
	"GET /healthz":       {"Liveness: 200 while the process serves", nil, wire.Health{}, http.StatusOK, nil},
	"GET /readyz":        {"Readiness: 200 while the store answers and the broker is not draining", nil, wire.Health{}, http.StatusOK, nil},
	"GET " + OpenAPIPath: {"This document", nil, nil, http.StatusOK, nil},
	"GET /metrics":       {"Prometheus metrics of every queue (text exposition format)", nil, nil, http.StatusOK, nil},
	inboundPattern: {"Take a signed webhook (Standard Webhooks) into the source's queue, exactly once by webhook-id; " +
		"the signature is the authentication. The body is the message's, as sent. The headers are checked before the body is read; " +
		"past the bytes of bodies held at once the answer is 503 (inbound_busy) with Retry-After", nil, wire.SendResult{}, http.StatusOK, nil},
}

// openAPI answers the OpenAPI document of the broker's routes, built once
// (the first time it is asked for): the endpoint is open to any caller,
// and building it takes thousands of allocations.
func (s *Server) openAPI(*http.Request) (result, error) {
	doc, err := s.openAPIDoc()
	if err != nil {
		return result{}, err
	}
	return result{raw: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(doc)
	})}, nil
}

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// openAPI builds the OpenAPI 3.1 document of eps, the broker's endpoint
// table, with the error table of package wire. It fails when an endpoint
// and operations disagree.
func openAPI(eps []endpoint) ([]byte, error) {
	var missing, extra []string
	patterns := map[string]endpoint{}
	for _, e := range eps {
		patterns[e.pattern] = e
		if _, ok := operations[e.pattern]; !ok {
			missing = append(missing, e.pattern)
		}
	}
	for p := range operations {
		if _, ok := patterns[p]; !ok {
			extra = append(extra, p)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		return nil, fmt.Errorf("broker: the OpenAPI operations and the routes differ: routes without an operation %v, operations without a route %v", missing, extra)
	}
	g := &schemaGen{schemas: map[string]any{}, types: map[string]reflect.Type{}}
	codes, reasons := wire.ErrorTable()
	statuses := map[int][]string{}
	for c, s := range codes {
		statuses[s] = append(statuses[s], c)
	}
	paths := map[string]map[string]any{}
	add := func(pattern string, op operation, role keys.Role, auth bool) {
		method, path, _ := strings.Cut(pattern, " ")
		o := map[string]any{
			"operationId": operationID(method, path),
			"summary":     op.summary,
			"responses":   map[string]any{},
		}
		if auth {
			o["description"] = fmt.Sprintf("Needs a key of role %s or above", role)
			if role == anyRole {
				o["description"] = "Needs any valid key"
			}
		} else {
			o["security"] = []any{}
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range op.query {
			schema := map[string]any{"type": "integer", "format": "int64"}
			if name, ok := strings.CutSuffix(q, ":string"); ok {
				q, schema = name, map[string]any{"type": "string"}
			}
			params = append(params, map[string]any{"name": q, "in": "query", "schema": schema})
		}
		if params != nil {
			o["parameters"] = params
		}
		if op.in != nil {
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(op.in))}}}
		}
		if pattern == inboundPattern {
			for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
				params = append(params, map[string]any{"name": h, "in": "header", "required": true, "schema": map[string]any{"type": "string"}})
			}
			o["parameters"] = params
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"*/*": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		}
		res := o["responses"].(map[string]any)
		ok := map[string]any{"description": http.StatusText(op.status)}
		switch {
		case op.out != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(op.out))}}
		case pattern == "GET "+OpenAPIPath:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}
		case pattern == "GET /metrics":
			ok["content"] = map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}
		}
		res[strconv.Itoa(op.status)] = ok
		for s := range statuses {
			res[strconv.Itoa(s)] = map[string]any{"$ref": "#/components/responses/Error"}
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = o
	}
	for _, e := range eps {
		add(e.pattern, operations[e.pattern], e.role, true)
	}
	for p, op := range openRoutes {
		add(p, op, keys.Admin, p == "GET /metrics")
	}
	errSchema := g.schema(reflect.TypeOf(wire.ErrorResponse{}))
	codeNames := make([]string, 0, len(codes))
	for c := range codes {
		codeNames = append(codeNames, c)
	}
	sort.Strings(codeNames)
	// The codes and reasons are closed lists: name them in the schema.
	errObj := g.schemas["Error"].(map[string]any)["properties"].(map[string]any)
	errObj["code"] = map[string]any{"type": "string", "enum": codeNames}
	errObj["reason"] = map[string]any{"type": "string", "enum": reasons}
	var statusText []string
	for _, s := range slices.Sorted(maps.Keys(statuses)) {
		cs := statuses[s]
		sort.Strings(cs)
		statusText = append(statusText, fmt.Sprintf("%d: %s", s, strings.Join(cs, ", ")))
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "mqlite broker",
			"version": "1",
			"description": "The HTTP/JSON API of mqlite serve: a message queue and transactional outbox in one SQLite file. " +
				"Every error is an ErrorResponse whose code maps to one status (" + strings.Join(statusText, "; ") +
				") and whose reason names the exact cause. See docs/api-reference-broker.md.",
		},
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{
				"type": "http", "scheme": "bearer", "description": "An access key: mqlite keys create"}},
			"schemas": g.schemas,
			"responses": map[string]any{"Error": map[string]any{
				"description": "An error: see the code and the reason",
				"content":     map[string]any{"application/json": map[string]any{"schema": errSchema}},
			}},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// operationID names an operation for generated clients, uniquely: the
// method and the path's words, as in postQueuesByQueueMessagesBatch.
func operationID(method, path string) string {
	id := strings.ToLower(method)
	for _, part := range strings.Split(strings.TrimPrefix(path, "/v1"), "/") {
		if part == "" {
			continue
		}
		if p, ok := strings.CutPrefix(part, "{"); ok {
			p = strings.TrimSuffix(p, "}")
			id += "By" + strings.ToUpper(p[:1]) + p[1:]
			continue
		}
		for _, w := range strings.FieldsFunc(part, func(r rune) bool { return r == '-' || r == '.' }) {
			id += strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return id
}

// schemaGen makes JSON Schemas (OpenAPI 3.1's dialect) of Go types by
// reflection, as encoding/json encodes them: one component per struct.
type schemaGen struct {
	schemas map[string]any
	types   map[string]reflect.Type // the Go type of each component, against name clashes
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case rawType:
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return map[string]any{"anyOf": []any{g.schema(t.Elem()), map[string]any{"type": "null"}}}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		name := t.Name()
		if prev, ok := g.types[name]; ok {
			if prev != t {
				panic(fmt.Sprintf("broker: two wire types named %s (%s and %s)", name, prev, t))
			}
		} else {
			g.types[name] = t
			g.schemas[name] = map[string]any{} // placeholder: a type may refer to itself
			props := map[string]any{}
			g.fields(t, props)
			g.schemas[name] = map[string]any{"type": "object", "properties": props}
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Int64, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Interface:
		return map[string]any{}
	}
	panic(fmt.Sprintf("broker: no JSON schema for %s", t))
}

// fields adds the JSON properties of struct t to props, flattening
// embedded structs without a name as encoding/json does.
func (g *schemaGen) fields(t reflect.Type, props map[string]any) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			g.fields(f.Type, props)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
	}
}
