// Package setting reads a numeric config field by the one rule every
// Config and Options of mqlite follows: 0 means the default, a positive
// value is taken as given, and, where a field can be turned off, -1 means
// off. Any other negative value is refused.
//
// The errors are plain: each caller wraps them in its own bad-config
// error, which matches mqlite.ErrInvalidArgument.
package setting

import (
	"fmt"
	"time"
)

// Number is the type of a field Default and DefaultOrOff read.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Default reads the field named field, whose value is v: def when v is 0,
// v when it is positive, an error when it is negative.
func Default[T Number](field string, v, def T) (T, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0:
		return v, fmt.Errorf("negative %s %s, want a positive value or 0 for the default", field, show(v))
	}
	return v, nil
}

// DefaultOrOff reads the field named field, whose value is v, for a field
// that -1 turns off: def when v is 0, off when it is -1, v when it is
// positive, an error for any other negative value.
func DefaultOrOff[T Number](field string, v, def, off T) (T, error) {
	switch {
	case v == 0:
		return def, nil
	case v == -1:
		return off, nil
	case v < 0:
		return v, fmt.Errorf("%s %s, want a positive value, 0 for the default or -1 for off", field, show(v))
	}
	return v, nil
}

// show prints v as a duration when it is one.
func show[T Number](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v)
}
