package setting_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/setting"
)

func TestDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v, want time.Duration
		err     string // a part of the error; "" for none
	}{
		{"zero is the default", 0, time.Second, ""},
		{"positive is kept", time.Minute, time.Minute, ""},
		{"smallest positive is kept", 1, 1, ""},
		{"-1 is refused", -1, -1, "negative Timeout -1ns"},
		{"negative is refused", -time.Second, -time.Second, "negative Timeout -1s"},
	}
	for _, tc := range tests {
		got, err := setting.Default("Timeout", tc.v, time.Second)
		check(t, tc.name, got, tc.want, err, tc.err)
	}
}

func TestDefaultOrOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v, want int
		err     string
	}{
		{"zero is the default", 0, 8, ""},
		{"-1 is off", -1, 0, ""},
		{"positive is kept", 3, 3, ""},
		{"-2 is refused", -2, -2, "Prefetch -2, want a positive value, 0 for the default or -1 for off"},
	}
	for _, tc := range tests {
		got, err := setting.DefaultOrOff("Prefetch", tc.v, 8, 0)
		check(t, tc.name, got, tc.want, err, tc.err)
	}
	if got, err := setting.DefaultOrOff("Jitter", -1.0, 0.2, 0); got != 0 || err != nil {
		t.Errorf("float -1: %v, %v; want 0 (off)", got, err)
	}
}

func check[T comparable](t *testing.T, name string, got, want T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s: %v", name, err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("%s: error %v, want %q", name, err, wantErr)
	case wantErr == "" && got != want:
		t.Errorf("%s: %v, want %v", name, got, want)
	}
}
