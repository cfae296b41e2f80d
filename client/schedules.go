package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

func spath(name string) string { return "/v1/schedules/" + url.PathEscape(name) }

// CreateSchedule creates a schedule, as Store.CreateSchedule. Needs an admin
// key that covers opts.Target; a key that does not cover every queue names
// its schedules "TARGET/NAME", in the namespace of their target (see
// mqlite.ScheduleNamespace), or is refused (ErrForbidden).
func (c *Client) CreateSchedule(ctx context.Context, name string, opts mqlite.ScheduleOptions) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/schedules",
		in: wire.CreateScheduleRequest{Name: name, Options: wire.FromScheduleOptions(opts)}})
}

// UpdateSchedule replaces the options of a schedule, as
// Store.UpdateSchedule. The key must cover the old target and the new.
func (c *Client) UpdateSchedule(ctx context.Context, name string, opts mqlite.ScheduleOptions) error {
	return c.do(ctx, call{method: http.MethodPut, path: spath(name),
		in: wire.UpdateScheduleRequest{Options: wire.FromScheduleOptions(opts)}})
}

// DeleteSchedule removes a schedule, as Store.DeleteSchedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: spath(name)})
}

// GetSchedule returns one schedule, as Store.GetSchedule.
func (c *Client) GetSchedule(ctx context.Context, name string) (mqlite.ScheduleInfo, error) {
	var out wire.Schedule
	if err := c.do(ctx, call{method: http.MethodGet, path: spath(name), out: &out}); err != nil {
		return mqlite.ScheduleInfo{}, err
	}
	return out.ScheduleInfo()
}

// ListSchedules returns one page of the schedules whose target the key
// covers, in name order, as Store.ListSchedules: those after opts.After, at
// most opts.Max, within opts.MaxBytes and the broker's answer budget (the
// first always comes). A page may hold fewer than asked; the next starts
// after the last name of this one, and an empty page is the end.
func (c *Client) ListSchedules(ctx context.Context, opts mqlite.ListSchedulesParams) ([]mqlite.ScheduleInfo, error) {
	v := url.Values{}
	if opts.After != "" {
		v.Set("after", opts.After)
	}
	if opts.Max != 0 {
		v.Set("max", strconv.Itoa(opts.Max))
	}
	if opts.MaxBytes != 0 {
		v.Set("max_bytes", strconv.FormatInt(opts.MaxBytes, 10))
	}
	path := "/v1/schedules"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.SchedulesResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: path, out: &out}); err != nil {
		return nil, err
	}
	res := make([]mqlite.ScheduleInfo, 0, len(out.Schedules))
	for _, s := range out.Schedules {
		info, err := s.ScheduleInfo()
		if err != nil {
			return nil, err
		}
		res = append(res, info)
	}
	return res, nil
}
