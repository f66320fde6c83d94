// Package docsref has no code: its test checks docs/reference.md and the
// Events table of docs/operations.md against the code and the CRD, so that
// the reference lists every field, annotation, label, Event and candidate
// metric cle has, and nothing it does not.
package docsref
