package consumer

// LoopOptions is the former name of LoopConfig.
//
// Deprecated: use LoopConfig.
type LoopOptions = LoopConfig

// BatchOptions is the former name of BatchConfig.
//
// Deprecated: use BatchConfig.
type BatchOptions = BatchConfig
