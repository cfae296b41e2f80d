// Package openapicheck holds only a test: it validates the broker's
// OpenAPI document (docs/openapi.json, which the broker's own test keeps
// equal to what GET /v1/openapi.json serves) with a maintained OpenAPI
// library. It is a module of its own so that the library stays out of
// mqlite's go.mod.
package openapicheck
