package broker

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// routes builds the mux from the route table: each endpoint's pattern,
// role, scope, handler and answer kind. docs/api-reference-broker.md lists
// the same table. Each handler lives in its family's file, named the same
// in internal/wire, client and cmd/mqlite (docs/internals.md, "Where things
// are").
func (s *Server) routes() http.Handler {
	const q = "/v1/queues/{queue}"
	eps := []endpoint{
		{"POST " + q + "/messages", keys.Producer, "queue", s.send, noMessages},
		{"POST " + q + "/messages/batch", keys.Producer, "queue", s.sendBatch, noMessages},
		{"GET " + q + "/messages", keys.Consumer, "queue", s.peek, reads},
		{"GET " + q + "/find", keys.Consumer, "queue", s.find, reads},
		{"POST " + q + "/receive", keys.Consumer, "queue", s.receive, claims},
		{"POST " + q + "/complete", keys.Consumer, "queue", s.complete, noMessages},
		{"POST " + q + "/complete-batch", keys.Consumer, "queue", s.completeBatch, noMessages},
		{"POST " + q + "/complete-receive", keys.Consumer, "queue", s.completeReceive, claims},
		{streamPattern, keys.Consumer, "queue", s.stream, noMessages},
		{"POST " + q + "/abandon", keys.Consumer, "queue", s.abandon, noMessages},
		{"POST " + q + "/release", keys.Consumer, "queue", s.release, noMessages},
		{"POST " + q + "/reject", keys.Consumer, "queue", s.reject, noMessages},
		{"POST " + q + "/defer", keys.Consumer, "queue", s.deferMsg, noMessages},
		{"POST " + q + "/receive-deferred", keys.Consumer, "queue", s.receiveDeferred, claims},
		{"POST " + q + "/renew", keys.Consumer, "queue", s.renew, noMessages},
		{"POST " + q + "/renew-batch", keys.Consumer, "queue", s.renewBatch, noMessages},
		{"GET " + q + "/stats", keys.Consumer, "queue", s.stats, noMessages},
		{"GET " + q + "/dead-letters", keys.Admin, "queue", s.deadLetters, reads},
		{"POST " + q + "/dead-letters/redrive", keys.Admin, "queue", s.redrive, noMessages},
		{"POST " + q + "/purge", keys.Admin, "queue", s.purge, noMessages},
		{"POST " + q + "/deliver-now", keys.Admin, "queue", s.deliverNow, noMessages},
		{"GET /v1/queues", keys.Admin, "", s.listQueues, noMessages},
		{"POST /v1/queues", keys.Admin, "", s.createQueue, noMessages},
		{"GET " + q, keys.Admin, "queue", s.getQueue, noMessages},
		{"PUT " + q, keys.Admin, "queue", s.updateQueue, noMessages},
		{"DELETE " + q, keys.Admin, "queue", s.deleteQueue, noMessages},
		{"POST " + q + "/pause", keys.Admin, "queue", s.pauseQueue, noMessages},
		{"POST " + q + "/resume", keys.Admin, "queue", s.resumeQueue, noMessages},
		{"GET /v1/topics", keys.Admin, "", s.listTopics, noMessages},
		{"POST /v1/topics", keys.Admin, "", s.createTopic, noMessages},
		{"GET /v1/topics/{topic}", keys.Admin, "topic", s.getTopic, noMessages},
		{"DELETE /v1/topics/{topic}", keys.Admin, "topic", s.deleteTopic, noMessages},
		{"POST /v1/topics/{topic}/subscriptions", keys.Admin, "topic", s.createSubscription, noMessages},
		{"PUT /v1/topics/{topic}/subscriptions/{queue}", keys.Admin, "topic", s.updateSubscription, noMessages},
		{"DELETE /v1/topics/{topic}/subscriptions/{queue}", keys.Admin, "topic", s.deleteSubscription, noMessages},
		{"GET /v1/schedules", keys.Admin, "", s.listSchedules, noMessages},
		{"POST /v1/schedules", keys.Admin, "", s.createSchedule, noMessages},
		{"GET /v1/schedules/{schedule}", keys.Admin, "", s.getSchedule, noMessages},
		{"PUT /v1/schedules/{schedule}", keys.Admin, "", s.updateSchedule, noMessages},
		{"DELETE /v1/schedules/{schedule}", keys.Admin, "", s.deleteSchedule, noMessages},
		{"GET /v1/keys", keys.Admin, "", s.listKeys, noMessages},
		{"POST /v1/keys", keys.Admin, "", s.createKey, noMessages},
		{"DELETE /v1/keys/{id}", keys.Admin, "", s.revokeKey, noMessages},
		{"POST /v1/backup", keys.Admin, "", s.backup, noMessages},
		{"GET /v1/whoami", anyRole, "", s.whoami, noMessages},
		{"GET /v1/counts", keys.Consumer, "", s.counts, noMessages},
		{commitPattern, anyRole, "", s.commit, noMessages},
	}
	mux := http.NewServeMux()
	for _, e := range eps {
		mux.Handle(e.pattern, s.wrap(e))
	}
	s.eps = eps
	s.openAPIDoc = sync.OnceValues(func() ([]byte, error) { return openAPI(eps) })
	mux.Handle("GET "+OpenAPIPath, s.open(s.openAPI))
	s.mountUI(mux)
	s.mountInbound(mux)
	if s.cfg.PublicMetrics {
		mux.Handle("GET /metrics", s.open(s.metrics))
	} else {
		mux.Handle("GET /metrics", s.wrap(endpoint{"GET /metrics", keys.Admin, "", s.metrics, noMessages}))
	}
	mux.Handle("GET /healthz", s.open(func(*http.Request) (result, error) { return ok(wire.Health{Status: "ok"}) }))
	mux.Handle("GET /readyz", s.open(s.ready))
	mux.Handle("/", s.open(func(r *http.Request) (result, error) {
		return result{}, &apiError{wire.CodeNotFound, wire.ReasonNoRoute, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)}
	}))
	return hsts(mux)
}
