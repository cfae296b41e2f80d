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
// the name in the query's "after", at most "max" of them (100 by default)
// within the answer's byte budget (a schedule carries its message's body).
// It reads the store a page at a time, each page bounded by what is left
// of the budget, so its memory is the budget and one schedule, however
// many schedules the file holds. When the answer stops before the end,
// next_after names its last schedule, for the next page.
func (s *Server) listSchedules(r *http.Request) (result, error) {
	opts := mqlite.ListSchedulesParams{After: r.URL.Query().Get("after")}
	err := queryInts(r, map[string]func(int64){
		"max":       func(v int64) { opts.Max = int(min(v, 1<<30)) },
		"max_bytes": func(v int64) { opts.MaxBytes = v },
	})
	if err != nil {
		return result{}, err
	}
	if opts.MaxBytes, err = s.budget(opts.MaxBytes); err != nil {
		return result{}, err
	}
	if opts.Max == 0 {
		opts.Max = defaultListMax
	}
	scope := keyOf(r.Context()).Scope
	out := wire.SchedulesResponse{Schedules: []wire.Schedule{}}
	var total int64
	for page := opts; ; {
		page.Max = opts.Max - len(out.Schedules)
		if opts.MaxBytes > 0 {
			page.MaxBytes = max(opts.MaxBytes-total, 1)
		}
		ss, err := s.st.ListSchedules(r.Context(), page)
		if err != nil {
			return result{}, err
		}
		if len(ss) == 0 {
			return ok(out)
		}
		for _, sc := range ss {
			page.After = sc.Name
			if !scope.HasQueue(sc.Options.Target) {
				continue
			}
			w := wire.FromSchedule(sc)
			if total += w.Size(); opts.MaxBytes > 0 && total > opts.MaxBytes && len(out.Schedules) > 0 {
				out.NextAfter = out.Schedules[len(out.Schedules)-1].Name
				return ok(out)
			}
			out.Schedules = append(out.Schedules, w)
			if len(out.Schedules) == opts.Max || opts.MaxBytes > 0 && total >= opts.MaxBytes {
				out.NextAfter = w.Name
				return ok(out)
			}
		}
	}
}

// defaultListMax is how many schedules one listing answers when the
// request does not say.
const defaultListMax = 100

func (s *Server) createSchedule(r *http.Request) (result, error) {
	req, err := decode[wire.CreateScheduleRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := require(r.Context(), keys.Admin, req.Options.Target); err != nil {
		return result{}, err
	}
	if err := requireNamespace(r.Context(), req.Name); err != nil {
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

// requireNamespace refuses a plain schedule name to a key that does not
// cover every queue: such a key names its schedules "TARGET/NAME", in the
// namespace of their target (mqlite.ScheduleNamespace), where the store
// admits only schedules of that target. In the namespace every schedule
// shares, a name in use by a schedule the key does not cover would answer
// 409 where a free one answers 201, telling the key that the name exists;
// in a namespace of its own target, a name in use is always one the key
// covers. The refusal is the same whether or not the name is in use.
func requireNamespace(ctx context.Context, name string) error {
	k := keyOf(ctx)
	if k.Scope.AllQueues() || mqlite.ScheduleNamespace(name) != "" {
		return nil
	}
	return &apiError{wire.CodeForbidden, wire.ReasonQueue, fmt.Sprintf(
		"key %s does not cover every queue: it names its schedules TARGET/NAME, in the namespace of their target", k.ID)}
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
