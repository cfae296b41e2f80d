package relay

// Options is the former name of Config.
//
// Deprecated: use Config.
type Options = Config
