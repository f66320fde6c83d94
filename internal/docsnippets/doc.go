// Package docsnippets has no code: its test builds the Go snippets of the
// README and docs/, so that what users copy compiles against the code.
package docsnippets
