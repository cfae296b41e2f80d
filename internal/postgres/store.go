package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// Now reads the store's now (see nowOf).
func (PostgreSQL) Now(_ context.Context, db driver.DBTX) (int64, error) { return nowOf(db) }

// StoreID returns the id of the store whose handle db runs on;
// errs.ErrNotAStore for any other handle.
func (PostgreSQL) StoreID(_ context.Context, db driver.DBTX) (int64, error) {
	h := driver.HandleOf(db)
	if h == nil {
		return 0, errs.ErrNotAStore
	}
	v, ok := stores.Load(h)
	if !ok {
		return 0, errs.ErrNotAStore
	}
	st := v.(*store)
	if _, err := st.now(); err != nil {
		return 0, err
	}
	return st.cfg.StoreID, nil
}

// MaxMessageBytes returns the largest message db's store takes.
func (PostgreSQL) MaxMessageBytes(_ context.Context, db driver.DBTX) (int64, error) {
	return maxBytesOf(db), nil
}
