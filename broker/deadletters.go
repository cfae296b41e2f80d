package broker

import (
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

func (s *Server) deadLetters(r *http.Request) (result, error) {
	opts, err := s.peekOptions(r)
	if err != nil {
		return result{}, err
	}
	msgs, err := s.st.PeekDeadLetters(r.Context(), r.PathValue("queue"), opts)
	if err != nil {
		return result{}, err
	}
	return ok(wire.MessagesResponse{Messages: wire.FromMessages(msgs)})
}

func (s *Server) redrive(r *http.Request) (result, error) {
	req, err := decode[wire.RedriveRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	return s.countSeqs(req.Seqs, func(seqs []int64) (int, error) {
		return s.st.Redrive(r.Context(), r.PathValue("queue"), mqlite.RedriveOptions{Seqs: seqs})
	})
}
