package consumer

// ReasonOf exposes reason to the tests.
var ReasonOf = reason
