package pgtest

// DebianRoot lets the tests hide Debian's folder of PostgreSQL's programs.
var DebianRoot = &debianRoot
