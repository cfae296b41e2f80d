package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/outbox"
)

// fill sets every exported field of the struct v points to a value of its
// own, not zero, and fails on a field of a kind it does not know: a field
// added to a shape is then filled, or the test says what to teach it.
func fill(t *testing.T, v any) {
	t.Helper()
	fillValue(t, reflect.ValueOf(v).Elem())
}

func fillValue(t *testing.T, s reflect.Value) {
	t.Helper()
	for i := range s.NumField() {
		f, sf := s.Field(i), s.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		n := int64(i + 1)
		switch {
		case sf.Type == reflect.TypeFor[mqlite.Ordering]():
			f.Set(reflect.ValueOf(mqlite.FIFO)) // the one value besides the zero
		case sf.Type == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(time.UnixMilli(1_800_000_000_000 + n*1000).UTC()))
		case sf.Type == reflect.TypeFor[json.RawMessage]():
			f.SetBytes([]byte(`{"field":"` + sf.Name + `"}`))
		case sf.Type == reflect.TypeFor[[]string]():
			f.Set(reflect.ValueOf([]string{"value of " + sf.Name}))
		case sf.Type == reflect.TypeFor[[]byte]():
			f.SetBytes([]byte("body of field " + sf.Name))
		case sf.Type == reflect.TypeFor[map[string]string]():
			f.Set(reflect.ValueOf(map[string]string{"key": sf.Name}))
		case f.Kind() == reflect.String:
			f.SetString("value of " + sf.Name)
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(n * int64(time.Millisecond)) // whole milliseconds, for a Duration
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Struct:
			fillValue(t, f)
		case f.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
			f.Set(reflect.MakeSlice(sf.Type, 2, 2)) // two elements, each filled
			for j := range 2 {
				fillValue(t, f.Index(j))
			}
		default:
			t.Fatalf("fill: %s.%s is a %s: teach fill a value for it", s.Type(), sf.Name, sf.Type)
		}
	}
}

// same fails unless got and want hold the same value in every exported
// field (instants compared with Equal).
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range w.NumField() {
		sf := w.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		a, b := g.Field(i).Interface(), w.Field(i).Interface()
		if at, ok := a.(time.Time); ok && at.Equal(b.(time.Time)) {
			continue
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: field %s came back as %v, want %v", what, sf.Name, a, b)
		}
	}
}

// nonZero fails when an exported field of v is zero: a field of the wire
// shape that its converter does not set.
func nonZero(t *testing.T, what string, v any) {
	t.Helper()
	s := reflect.ValueOf(v)
	for i := range s.NumField() {
		if sf := s.Type().Field(i); sf.IsExported() && s.Field(i).IsZero() {
			t.Errorf("%s: field %s is not carried", what, sf.Name)
		}
	}
}

// throughJSON encodes v as the broker does and decodes it into a new T, as
// the client does.
func throughJSON[T any](t *testing.T, v any) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEveryFieldCrossesTheWire fills every exported field of a received
// mqlite.Message, of an outbox.Message to send, and of the queue and
// schedule options, by reflection, and sends each through its one
// converter, JSON and back: every field must come back as it went. A field added to one shape and not to the other, or not to
// its converter, fails here.
func TestEveryFieldCrossesTheWire(t *testing.T) {
	t.Run("received", func(t *testing.T) {
		var m mqlite.Message
		fill(t, &m)
		w := wire.FromMessage(m)
		nonZero(t, "wire.ReceivedMessage", w)
		same(t, "mqlite.Message", throughJSON[wire.ReceivedMessage](t, w).Message(), m)
		if got, want := reflect.TypeFor[wire.ReceivedMessage]().NumField(), reflect.TypeFor[mqlite.Message]().NumField(); got != want {
			t.Errorf("wire.ReceivedMessage has %d fields, mqlite.Message %d", got, want)
		}
	})
	t.Run("to send", func(t *testing.T) {
		var m outbox.Message
		fill(t, &m)
		w := wire.FromOutbox(m)
		nonZero(t, "wire.SendMessage", w)
		same(t, "outbox.Message", throughJSON[wire.SendMessage](t, w).Outbox(), m)
		if got, want := reflect.TypeFor[wire.SendMessage]().NumField(), reflect.TypeFor[outbox.Message]().NumField(); got != want {
			t.Errorf("wire.SendMessage has %d fields, outbox.Message %d", got, want)
		}
	})
	t.Run("commit lock", func(t *testing.T) {
		var l mqlite.Lock
		fill(t, &l)
		w := wire.FromLock(l)
		nonZero(t, "wire.CommitLock", w)
		same(t, "mqlite.Lock", throughJSON[wire.CommitLock](t, w).Lock(), l)
		if got, want := reflect.TypeFor[wire.CommitLock]().NumField(), reflect.TypeFor[mqlite.Lock]().NumField(); got != want {
			t.Errorf("wire.CommitLock has %d fields, mqlite.Lock %d", got, want)
		}
	})
	t.Run("job", func(t *testing.T) {
		var j jobs.RawJob
		fill(t, &j)
		w := wire.FromRawJob(j)
		nonZero(t, "wire.CommitJob", w)
		nonZero(t, "wire.JobUnique", *w.Unique)
		same(t, "jobs.RawJob", throughJSON[wire.CommitJob](t, w).RawJob(), j)
		var r jobs.InsertResult
		fill(t, &r)
		jr := wire.FromInsertResult(r)
		nonZero(t, "wire.JobResult", jr)
		same(t, "jobs.InsertResult", throughJSON[wire.JobResult](t, jr).InsertResult(), r)
	})
	t.Run("queue options", func(t *testing.T) {
		var o mqlite.QueueOptions
		fill(t, &o)
		w := wire.FromQueueOptions(o)
		nonZero(t, "wire.QueueOptions", w)
		got, err := throughJSON[wire.QueueOptions](t, w).Options()
		if err != nil {
			t.Fatal(err)
		}
		same(t, "mqlite.QueueOptions", got, o)
	})
	t.Run("schedule options", func(t *testing.T) {
		var o mqlite.ScheduleOptions
		fill(t, &o)
		w := wire.FromScheduleOptions(o)
		nonZero(t, "wire.ScheduleOptions", w)
		got, err := throughJSON[wire.ScheduleOptions](t, w).Options()
		if err != nil {
			t.Fatal(err)
		}
		same(t, "mqlite.ScheduleOptions", got, o)
	})
}
