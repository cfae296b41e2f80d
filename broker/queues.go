package broker

import (
	"context"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

func (s *Server) purge(r *http.Request) (result, error) {
	req, err := decode[wire.PurgeRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	return s.countSeqs(req.Seqs, func(seqs []int64) (int, error) {
		return s.st.Purge(r.Context(), r.PathValue("queue"), mqlite.PurgeOptions{State: mqlite.State(req.State), Seqs: seqs})
	})
}

func (s *Server) stats(r *http.Request) (result, error) {
	st, err := s.st.Stats(r.Context(), r.PathValue("queue"))
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromStats(st))
}

func (s *Server) listQueues(r *http.Request) (result, error) {
	qs, err := s.st.ListQueues(r.Context())
	if err != nil {
		return result{}, err
	}
	return ok(wire.QueuesResponse{Queues: covered(r, qs, func(q mqlite.QueueInfo) string { return q.Name }, wire.FromQueueInfo)})
}

func (s *Server) createQueue(r *http.Request) (result, error) {
	req, err := decode[wire.CreateQueueRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Name); err != nil {
		return result{}, err
	}
	opts, err := req.Options.Options()
	if err != nil {
		return result{}, err
	}
	if err := s.st.CreateQueue(r.Context(), req.Name, opts); err != nil {
		return result{}, err
	}
	q, err := s.st.GetQueue(r.Context(), req.Name)
	if err != nil {
		return result{}, err
	}
	return created(wire.FromQueueInfo(q))
}

func (s *Server) getQueue(r *http.Request) (result, error) {
	q, err := s.st.GetQueue(r.Context(), r.PathValue("queue"))
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromQueueInfo(q))
}

func (s *Server) updateQueue(r *http.Request) (result, error) {
	req, err := decode[wire.UpdateQueueRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	opts, err := req.Options.Options()
	if err != nil {
		return result{}, err
	}
	name := r.PathValue("queue")
	if err := s.st.UpdateQueue(r.Context(), name, opts); err != nil {
		return result{}, err
	}
	q, err := s.st.GetQueue(r.Context(), name)
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromQueueInfo(q))
}

func (s *Server) pauseQueue(r *http.Request) (result, error) {
	return s.setPaused(r, s.st.PauseQueue)
}

func (s *Server) resumeQueue(r *http.Request) (result, error) {
	return s.setPaused(r, s.st.ResumeQueue)
}

// setPaused runs PauseQueue or ResumeQueue on the request's queue and
// answers the queue as it is then. The request has no body (a body is
// refused).
func (s *Server) setPaused(r *http.Request, set func(context.Context, string) error) (result, error) {
	if err := noBody(r); err != nil {
		return result{}, err
	}
	name := r.PathValue("queue")
	if err := set(r.Context(), name); err != nil {
		return result{}, err
	}
	q, err := s.st.GetQueue(r.Context(), name)
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromQueueInfo(q))
}

func (s *Server) deleteQueue(r *http.Request) (result, error) {
	if err := s.st.DeleteQueue(r.Context(), r.PathValue("queue")); err != nil {
		return result{}, err
	}
	return noContent()
}

// counts answers the per-state counts and counters of every queue the key
// covers, from Store.Metrics: no table is read, so a dashboard may poll it
// however large the queues (Stats counts from the indexes).
func (s *Server) counts(r *http.Request) (result, error) {
	all, err := s.st.Metrics(r.Context())
	if err != nil {
		return result{}, err
	}
	ages, err := s.st.Ages(r.Context())
	if err != nil {
		return result{}, err
	}
	byQueue := make(map[string]mqlite.QueueAges, len(ages))
	for _, a := range ages {
		byQueue[a.Queue] = a
	}
	return ok(wire.CountsResponse{Queues: covered(r, all, func(m mqlite.QueueMetrics) string { return m.Queue },
		func(m mqlite.QueueMetrics) wire.QueueCounts { return wire.FromMetrics(m).WithAges(byQueue[m.Queue]) })})
}

// covered returns conv of each of items whose queue (or topic) name the
// request's key covers, in order; never nil, so that an empty list is [] in
// JSON. Every listing answers only what the key may use.
func covered[T, W any](r *http.Request, items []T, name func(T) string, conv func(T) W) []W {
	k := keyOf(r.Context())
	out := []W{}
	for _, it := range items {
		if k.Scope.HasQueue(name(it)) {
			out = append(out, conv(it))
		}
	}
	return out
}
