package mqlite

// Options is the former name of Config.
//
// Deprecated: use Config.
type Options = Config

// PeekOptions is the former name of PeekParams.
//
// Deprecated: use PeekParams.
type PeekOptions = PeekParams
