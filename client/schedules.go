package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

func spath(name string) string { return "/v1/schedules/" + url.PathEscape(name) }

// CreateSchedule creates a schedule, as Store.CreateSchedule. Needs an admin
// key that covers opts.Target.
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

// ListSchedules returns the schedules whose target the key covers, in name
// order.
func (c *Client) ListSchedules(ctx context.Context) ([]mqlite.ScheduleInfo, error) {
	var out wire.SchedulesResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/schedules", out: &out}); err != nil {
		return nil, err
	}
	res := make([]mqlite.ScheduleInfo, len(out.Schedules))
	for i, s := range out.Schedules {
		var err error
		if res[i], err = s.ScheduleInfo(); err != nil {
			return nil, err
		}
	}
	return res, nil
}
