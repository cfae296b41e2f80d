package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
)

// TestSchedulesOverClient: schedules are created, read, changed and deleted
// through the broker, its errors match the root sentinels, and an admin key
// scoped to some queues reaches only the schedules that send into them (the
// others are not found).
func TestSchedulesOverClient(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.Queue(t, "other", mqlite.QueueOptions{})
	url, admin := serve(t, b, broker.Config{})
	c := newClient(t, url, admin, b.Clock)
	opts := mqlite.ScheduleOptions{Target: "q", Cron: "*/5 * * * *", TimeZone: "Europe/Paris", Body: []byte("tick"),
		Subject: "s", Properties: map[string]string{"k": "v"}, TTL: time.Hour, CatchUp: 3}
	must(t, c.CreateSchedule(ctx, "five", opts))
	must(t, c.CreateSchedule(ctx, "other", mqlite.ScheduleOptions{Target: "other", Every: time.Hour}))
	got, err := c.GetSchedule(ctx, "five")
	must(t, err)
	want, err := b.Store.GetSchedule(ctx, "five")
	must(t, err)
	if got.Name != "five" || got.Options.Cron != opts.Cron || got.Options.TimeZone != "Europe/Paris" ||
		string(got.Options.Body) != "tick" || got.Options.Properties["k"] != "v" || got.Options.TTL != time.Hour ||
		got.Options.CatchUp != 3 || !got.NextAt.Equal(want.NextAt) {
		t.Fatalf("GetSchedule = %+v, want %+v", got, want)
	}
	opts.Body = []byte("tock")
	must(t, c.UpdateSchedule(ctx, "five", opts))
	list, err := c.ListSchedules(ctx, mqlite.ListSchedulesParams{})
	must(t, err)
	if len(list) != 2 || list[0].Name != "five" || string(list[0].Options.Body) != "tock" {
		t.Fatalf("ListSchedules = %+v", list)
	}

	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"exists", c.CreateSchedule(ctx, "five", opts), []error{mqlite.ErrScheduleExists}},
		{"not found", func() error { _, err := c.GetSchedule(ctx, "nope"); return err }(), []error{mqlite.ErrScheduleNotFound}},
		{"bad cron", c.CreateSchedule(ctx, "x", mqlite.ScheduleOptions{Target: "q", Cron: "nope"}),
			[]error{mqlite.ErrInvalidSchedule, mqlite.ErrInvalidArgument}},
		{"missing target", c.CreateSchedule(ctx, "x", mqlite.ScheduleOptions{Target: "gone", Every: time.Hour}),
			[]error{mqlite.ErrQueueNotFound}},
	} {
		for _, w := range tc.want {
			if !errors.Is(tc.err, w) {
				t.Errorf("%s: %v, want it to match %v", tc.name, tc.err, w)
			}
		}
	}

	_, secret, err := c.CreateKey(ctx, "admin", []string{"q"})
	must(t, err)
	scoped := newClient(t, url, secret, b.Clock)
	if list, err := scoped.ListSchedules(ctx, mqlite.ListSchedulesParams{}); err != nil || len(list) != 1 || list[0].Name != "five" {
		t.Fatalf("scoped ListSchedules = %+v, %v; want five only", list, err)
	}
	// A schedule of another queue is not found, as a name that does not
	// exist; sending into another queue is forbidden.
	for name, c := range map[string]struct {
		err, want error
	}{
		"get":    {func() error { _, err := scoped.GetSchedule(ctx, "other"); return err }(), mqlite.ErrScheduleNotFound},
		"delete": {scoped.DeleteSchedule(ctx, "other"), mqlite.ErrScheduleNotFound},
		"create": {scoped.CreateSchedule(ctx, "y", mqlite.ScheduleOptions{Target: "other", Every: time.Hour}), client.ErrForbidden},
		"move":   {scoped.UpdateSchedule(ctx, "five", mqlite.ScheduleOptions{Target: "other", Every: time.Hour}), client.ErrForbidden},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("scoped %s of another queue's schedule: %v, want %v", name, c.err, c.want)
		}
	}
	must(t, scoped.DeleteSchedule(ctx, "five"))
	if _, err := c.GetSchedule(ctx, "five"); !errors.Is(err, mqlite.ErrScheduleNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}
