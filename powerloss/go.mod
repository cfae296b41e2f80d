module github.com/mqlite/mqlite/powerloss

go 1.26.8

replace github.com/mqlite/mqlite => ..

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.28.0 // indirect
