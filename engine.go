package mqlite

import (
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/engine"
)

// sqlite is the engine of every store: the SQLite engine, the one file of
// the package that names internal/engine (the seam test pins it). Every
// statement of the package goes through a Store's eng, which is this.
var sqlite driver.Driver = engine.SQLite{}

// init registers the engine, so that the packages acting on a caller's
// bare transaction (outbox, consumer, broker, jobs) find its Executor
// through driver.Of.
func init() { driver.Register(sqlite) }
