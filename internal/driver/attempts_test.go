package driver_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mqlite/mqlite/internal/driver"
)

// TestAppendAttempt: the history keeps the last n attempts, oldest first;
// n of 0 or less leaves it as it is; an error and a worker past their
// bounds are cut at a rune boundary; a history that does not parse is an
// error.
func TestAppendAttempt(t *testing.T) {
	t.Parallel()
	h := ""
	for i := range 5 {
		var err error
		h, err = driver.AppendAttempt(h, driver.Attempt{At: int64(i), Error: string(rune('a' + i)), Worker: "w"}, 3)
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := driver.ParseAttempts(h)
	if err != nil || len(got) != 3 || got[0].At != 2 || got[0].Error != "c" || got[2].At != 4 || got[2].Worker != "w" {
		t.Fatalf("history %s: %+v, %v, want attempts 2 to 4", h, got, err)
	}
	if off, err := driver.AppendAttempt(h, driver.Attempt{At: 9}, 0); err != nil || off != h {
		t.Fatalf("n = 0: %q, %v, want the history unchanged", off, err)
	}
	long := strings.Repeat("€", driver.MaxAttemptErrorLen) // 3 bytes each
	h, err = driver.AppendAttempt("", driver.Attempt{Error: long + "\xff", Worker: long}, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err = driver.ParseAttempts(h)
	if err != nil || len(got[0].Error) > driver.MaxAttemptErrorLen || len(got[0].Worker) > driver.MaxWorkerLen ||
		!utf8.ValidString(got[0].Error) || !utf8.ValidString(got[0].Worker) || len(got[0].Error) < driver.MaxAttemptErrorLen-2 {
		t.Fatalf("cut: error of %d bytes, worker of %d, %v", len(got[0].Error), len(got[0].Worker), err)
	}
	if _, err := driver.AppendAttempt("not json", driver.Attempt{}, 3); err == nil {
		t.Fatal("a history that does not parse was accepted")
	}
	if a, err := driver.ParseAttempts(""); a != nil || err != nil {
		t.Fatalf("no history: %+v, %v", a, err)
	}
}
