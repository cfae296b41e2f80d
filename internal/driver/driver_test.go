package driver

import (
	"database/sql"
	"testing"
)

// fake is a Driver that is only itself: the registry never calls it.
type fake struct {
	Driver
	name string
}

// TestOfIsTheRegisteredEngine: before any engine registers, Of refuses
// (panics: no store can exist); with one registered, Of answers it for any
// transaction, and a second registration leaves the first in place until
// Of learns to tell engines apart.
func TestOfIsTheRegisteredEngine(t *testing.T) {
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Of with no engine registered did not panic")
			}
		}()
		Of(nil)
	}()
	sqlite := &fake{name: "sqlite"}
	Register(sqlite)
	if got := Of((*sql.Tx)(nil)); got != sqlite {
		t.Fatalf("Of = %v, want the registered engine", got)
	}
	Register(&fake{name: "other"})
	if got := Of((*sql.DB)(nil)); got != sqlite {
		t.Fatalf("Of after a second Register = %v, want the first engine", got)
	}
}
