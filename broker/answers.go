package broker

import (
	"context"
	"encoding/json"
	"net/http"
)

// answerKind is how an endpoint's answer counts in Config.MaxAnswerBytes.
type answerKind int

const (
	noMessages answerKind = iota // carries no messages: not counted
	claims                       // carries what a claim took: counted once encoded
	reads                        // reads rows: holds MaxResponseBytes before it reads them
)

// holdRead holds room in Config.MaxAnswerBytes for an answer of kind
// before its endpoint runs: MaxResponseBytes and a third (the JSON of the
// bodies, in base64) for a read; nothing when either bound is off, or for
// the other kinds. writeAnswer exchanges it for the answer's bytes.
func (s *Server) holdRead(ctx context.Context, kind answerKind) (held int, err error) {
	if s.answers == nil || kind != reads || s.cfg.MaxResponseBytes <= 0 {
		return 0, nil
	}
	n := int(min(s.cfg.MaxResponseBytes/3*4, s.cfg.MaxAnswerBytes))
	if err := s.answers.take(ctx, n); err != nil {
		return 0, err
	}
	return n, nil
}

// writeAnswer writes body with status, within Config.MaxAnswerBytes for
// the answers that carry messages: it encodes body and counts its bytes,
// in exchange for the room a read held (holdRead: a read waited for its
// room before it read, and does not wait again, so that the reads that
// hold room and the answers that wait for it never wait for each other);
// an answer of a claim waits for room as long as ctx lives (nothing is
// written when it ends: the client is gone). The room is given back once
// the answer is written.
func (s *Server) writeAnswer(ctx context.Context, w http.ResponseWriter, status int, body any, kind answerKind, held int) {
	if s.answers == nil || kind == noMessages {
		writeJSON(w, status, body)
		return
	}
	data, err := json.Marshal(body)
	if err != nil {
		s.answers.give(held)
		writeJSON(w, status, body) // the same error, reported the same way
		return
	}
	data = append(data, '\n')
	if kind == reads {
		s.answers.exchange(held, len(data))
	} else if err := s.answers.take(ctx, len(data)); err != nil {
		return
	}
	defer s.answers.give(len(data))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
