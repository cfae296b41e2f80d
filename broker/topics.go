package broker

import (
	"fmt"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

func (s *Server) listTopics(r *http.Request) (result, error) {
	ts, err := s.st.ListTopics(r.Context())
	if err != nil {
		return result{}, err
	}
	k := keyOf(r.Context())
	conv := func(t mqlite.TopicInfo) wire.Topic { return coveredTopic(k, t) }
	return ok(wire.TopicsResponse{Topics: covered(r, ts, func(t mqlite.TopicInfo) string { return t.Name }, conv)})
}

// coveredTopic is t on the wire with only the subscriptions whose queue k
// covers: a key learns nothing of the queues outside its scope.
func coveredTopic(k keys.Key, t mqlite.TopicInfo) wire.Topic {
	subs := t.Subscriptions
	t.Subscriptions = nil
	for _, sub := range subs {
		if k.Scope.HasQueue(sub.Queue) {
			t.Subscriptions = append(t.Subscriptions, sub)
		}
	}
	return wire.FromTopic(t)
}

// topicAnswer reads the topic name for the answer of a call on it.
func (s *Server) topicAnswer(r *http.Request, name string) (wire.Topic, error) {
	t, err := s.st.GetTopic(r.Context(), name)
	return coveredTopic(keyOf(r.Context()), t), err
}

func (s *Server) createTopic(r *http.Request) (result, error) {
	req, err := decode[wire.CreateTopicRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Name); err != nil {
		return result{}, err
	}
	if err := s.st.CreateTopic(r.Context(), req.Name); err != nil {
		return result{}, err
	}
	t, err := s.topicAnswer(r, req.Name)
	if err != nil {
		return result{}, err
	}
	return created(t)
}

func (s *Server) getTopic(r *http.Request) (result, error) {
	t, err := s.topicAnswer(r, r.PathValue("topic"))
	if err != nil {
		return result{}, err
	}
	return ok(t)
}

// deleteTopic deletes the topic with its subscription queues, all of which
// the key must cover: otherwise nothing is deleted (403). topics holds the
// check and the deletion together, so that no subscription the check did
// not see is deleted with the topic.
func (s *Server) deleteTopic(r *http.Request) (result, error) {
	s.topics.Lock()
	defer s.topics.Unlock()
	name := r.PathValue("topic")
	t, err := s.st.GetTopic(r.Context(), name)
	if err != nil {
		return result{}, err
	}
	k := keyOf(r.Context())
	for _, sub := range t.Subscriptions {
		if !k.Scope.HasQueue(sub.Queue) {
			return result{}, &apiError{wire.CodeForbidden, wire.ReasonQueue,
				fmt.Sprintf("key %s does not cover every subscription queue of %q", k.ID, name)}
		}
	}
	if err := s.st.DeleteTopic(r.Context(), name); err != nil {
		return result{}, err
	}
	return noContent()
}

func (s *Server) createSubscription(r *http.Request) (result, error) {
	req, err := decode[wire.CreateSubscriptionRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Queue); err != nil {
		return result{}, err
	}
	qo, err := req.Options.Options()
	if err != nil {
		return result{}, err
	}
	topic := r.PathValue("topic")
	s.topics.Lock()
	err = s.st.CreateSubscription(r.Context(), topic, req.Queue, mqlite.SubscriptionOptions{Filter: req.Filter, Queue: qo})
	s.topics.Unlock()
	if err != nil {
		return result{}, err
	}
	t, err := s.topicAnswer(r, topic)
	if err != nil {
		return result{}, err
	}
	return created(t)
}

// The routes of one subscription check the topic; these check the queue,
// which the call changes or deletes.

func (s *Server) updateSubscription(r *http.Request) (result, error) {
	req, err := decode[wire.UpdateSubscriptionRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	topic, queue := r.PathValue("topic"), r.PathValue("queue")
	if err := require(r.Context(), keys.Admin, queue); err != nil {
		return result{}, err
	}
	if err := s.st.UpdateSubscription(r.Context(), topic, queue, req.Filter); err != nil {
		return result{}, err
	}
	t, err := s.topicAnswer(r, topic)
	if err != nil {
		return result{}, err
	}
	return ok(t)
}

func (s *Server) deleteSubscription(r *http.Request) (result, error) {
	queue := r.PathValue("queue")
	if err := require(r.Context(), keys.Admin, queue); err != nil {
		return result{}, err
	}
	if err := s.st.DeleteSubscription(r.Context(), r.PathValue("topic"), queue); err != nil {
		return result{}, err
	}
	return noContent()
}
