package broker

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// routes builds the mux. docs/api-reference-broker.md lists the same table.
func (s *Server) routes() http.Handler {
	const q = "/v1/queues/{queue}"
	eps := []endpoint{
		{"POST " + q + "/messages", keys.Producer, "queue", s.send},
		{"POST " + q + "/messages/batch", keys.Producer, "queue", s.sendBatch},
		{"GET " + q + "/messages", keys.Consumer, "queue", s.peek},
		{"GET " + q + "/find", keys.Consumer, "queue", s.find},
		{"POST " + q + "/receive", keys.Consumer, "queue", s.receive},
		{"POST " + q + "/complete", keys.Consumer, "queue", s.complete},
		{"POST " + q + "/complete-batch", keys.Consumer, "queue", s.completeBatch},
		{"POST " + q + "/complete-receive", keys.Consumer, "queue", s.completeReceive},
		{streamPattern, keys.Consumer, "queue", s.stream},
		{"POST " + q + "/abandon", keys.Consumer, "queue", s.abandon},
		{"POST " + q + "/reject", keys.Consumer, "queue", s.reject},
		{"POST " + q + "/defer", keys.Consumer, "queue", s.deferMsg},
		{"POST " + q + "/receive-deferred", keys.Consumer, "queue", s.receiveDeferred},
		{"POST " + q + "/renew", keys.Consumer, "queue", s.renew},
		{"POST " + q + "/renew-batch", keys.Consumer, "queue", s.renewBatch},
		{"GET " + q + "/stats", keys.Consumer, "queue", s.stats},
		{"GET " + q + "/dead-letters", keys.Admin, "queue", s.deadLetters},
		{"POST " + q + "/dead-letters/redrive", keys.Admin, "queue", s.redrive},
		{"POST " + q + "/purge", keys.Admin, "queue", s.purge},
		{"POST " + q + "/deliver-now", keys.Admin, "queue", s.deliverNow},
		{"GET /v1/queues", keys.Admin, "", s.listQueues},
		{"POST /v1/queues", keys.Admin, "", s.createQueue},
		{"GET " + q, keys.Admin, "queue", s.getQueue},
		{"PUT " + q, keys.Admin, "queue", s.updateQueue},
		{"DELETE " + q, keys.Admin, "queue", s.deleteQueue},
		{"POST " + q + "/pause", keys.Admin, "queue", s.pauseQueue},
		{"POST " + q + "/resume", keys.Admin, "queue", s.resumeQueue},
		{"GET /v1/topics", keys.Admin, "", s.listTopics},
		{"POST /v1/topics", keys.Admin, "", s.createTopic},
		{"GET /v1/topics/{topic}", keys.Admin, "topic", s.getTopic},
		{"DELETE /v1/topics/{topic}", keys.Admin, "topic", s.deleteTopic},
		{"POST /v1/topics/{topic}/subscriptions", keys.Admin, "topic", s.createSubscription},
		{"PUT /v1/topics/{topic}/subscriptions/{queue}", keys.Admin, "topic", s.updateSubscription},
		{"DELETE /v1/topics/{topic}/subscriptions/{queue}", keys.Admin, "topic", s.deleteSubscription},
		{"GET /v1/schedules", keys.Admin, "", s.listSchedules},
		{"POST /v1/schedules", keys.Admin, "", s.createSchedule},
		{"GET /v1/schedules/{schedule}", keys.Admin, "", s.getSchedule},
		{"PUT /v1/schedules/{schedule}", keys.Admin, "", s.updateSchedule},
		{"DELETE /v1/schedules/{schedule}", keys.Admin, "", s.deleteSchedule},
		{"GET /v1/keys", keys.Admin, "", s.listKeys},
		{"POST /v1/keys", keys.Admin, "", s.createKey},
		{"DELETE /v1/keys/{id}", keys.Admin, "", s.revokeKey},
		{"POST /v1/backup", keys.Admin, "", s.backup},
		{"GET /v1/whoami", anyRole, "", s.whoami},
		{"GET /v1/counts", keys.Consumer, "", s.counts},
		{commitPattern, anyRole, "", s.commit},
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
		mux.Handle("GET /metrics", s.wrap(endpoint{"GET /metrics", keys.Admin, "", s.metrics}))
	}
	mux.Handle("GET /healthz", s.open(func(*http.Request) (result, error) { return ok(wire.Health{Status: "ok"}) }))
	mux.Handle("GET /readyz", s.open(s.ready))
	mux.Handle("/", s.open(func(r *http.Request) (result, error) {
		return result{}, &apiError{wire.CodeNotFound, wire.ReasonNoRoute, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)}
	}))
	return hsts(mux)
}
