module github.com/mqlite/mqlite/internal/release

go 1.26.8

require golang.org/x/mod v0.43.0

require go.uber.org/goleak v1.3.0
