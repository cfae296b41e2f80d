// Package chromium holds the dashboard's browser test: headless Chromium,
// driven by chromedp, against a broker with data. It is a module of its own
// so that chromedp and its protocol bindings stay out of the go.mod that a
// library user of mqlite requires; `make test` runs it like every module.
package chromium
