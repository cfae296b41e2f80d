package metrics

// CollectorOpts is the former name of CollectorConfig.
//
// Deprecated: use CollectorConfig.
type CollectorOpts = CollectorConfig

// ObserverOpts is the former name of ObserverConfig.
//
// Deprecated: use ObserverConfig.
type ObserverOpts = ObserverConfig
