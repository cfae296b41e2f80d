package broker

import (
	"context"
	"fmt"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// A schedule is reached through its target: an admin key scoped to some
// queues sees, creates, changes and deletes the schedules that send into
// them, and no others: the others answer as names that do not exist.

// listSchedules answers the schedules the key covers, in name order, after
// the name in the query's "after", within the answer's byte budget (a
// schedule carries its message's body): when the budget cuts the list,
// next_after names the last one answered, for the next page.
func (s *Server) listSchedules(r *http.Request) (result, error) {
	budget, err := s.budget(0)
	if err != nil {
		return result{}, err
	}
	after := r.URL.Query().Get("after")
	ss, err := s.st.ListSchedules(r.Context())
	if err != nil {
		return result{}, err
	}
	target := func(sc mqlite.ScheduleInfo) string { return sc.Options.Target }
	out := wire.SchedulesResponse{Schedules: []wire.Schedule{}}
	var total int64
	for _, sc := range covered(r, ss, target, wire.FromSchedule) {
		if sc.Name <= after && after != "" {
			continue
		}
		total += sc.Size()
		if budget > 0 && total > budget && len(out.Schedules) > 0 {
			out.NextAfter = out.Schedules[len(out.Schedules)-1].Name
			break
		}
		out.Schedules = append(out.Schedules, sc)
	}
	return ok(out)
}

func (s *Server) createSchedule(r *http.Request) (result, error) {
	req, err := decode[wire.CreateScheduleRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Options.Target); err != nil {
		return result{}, err
	}
	opts, err := req.Options.Options()
	if err != nil {
		return result{}, err
	}
	if err := s.st.CreateSchedule(r.Context(), req.Name, opts); err != nil {
		return result{}, err
	}
	sc, err := s.st.GetSchedule(r.Context(), req.Name)
	if err != nil {
		return result{}, err
	}
	return created(wire.FromSchedule(sc))
}

// scheduleInScope reads the schedule of the request's path and checks that
// the key covers its target. One the key does not cover is not found, with
// the very answer of a name that does not exist: a key learns nothing of
// the schedules outside its scope.
func (s *Server) scheduleInScope(ctx context.Context, name string) (mqlite.ScheduleInfo, error) {
	sc, err := s.st.GetSchedule(ctx, name)
	if err != nil {
		return sc, err
	}
	if !keyOf(ctx).Scope.HasQueue(sc.Options.Target) {
		return mqlite.ScheduleInfo{}, fmt.Errorf("%w: %q", mqlite.ErrScheduleNotFound, name)
	}
	return sc, nil
}

func (s *Server) getSchedule(r *http.Request) (result, error) {
	sc, err := s.scheduleInScope(r.Context(), r.PathValue("schedule"))
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromSchedule(sc))
}

func (s *Server) updateSchedule(r *http.Request) (result, error) {
	req, err := decode[wire.UpdateScheduleRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	name := r.PathValue("schedule")
	if _, err := s.scheduleInScope(r.Context(), name); err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Options.Target); err != nil {
		return result{}, err
	}
	opts, err := req.Options.Options()
	if err != nil {
		return result{}, err
	}
	if err := s.st.UpdateSchedule(r.Context(), name, opts); err != nil {
		return result{}, err
	}
	sc, err := s.st.GetSchedule(r.Context(), name)
	if err != nil {
		return result{}, err
	}
	return ok(wire.FromSchedule(sc))
}

func (s *Server) deleteSchedule(r *http.Request) (result, error) {
	name := r.PathValue("schedule")
	if _, err := s.scheduleInScope(r.Context(), name); err != nil {
		return result{}, err
	}
	if err := s.st.DeleteSchedule(r.Context(), name); err != nil {
		return result{}, err
	}
	return noContent()
}
