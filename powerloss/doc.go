// Package powerloss holds mqlite's power-loss tests. It has no code: the
// tests run stores in child processes (the test binary, re-executed) over
// the forgetful file system of package forgetfs, cut the power at random
// moments or at every step of an operation, and check the files as the cut
// left them. It is a module of its own, so that library users never
// inherit go-fuse. See docs/operations.md, "Power loss".
package powerloss
