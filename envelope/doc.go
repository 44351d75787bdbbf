// Package envelope is the vocabulary retrysafe speaks to models and to Go
// callers: the closed set of outcomes of a side-effecting tool call, the
// envelope that reports one, and the error classes that decide it.
//
// # Outcomes
//
// Every guarded call ends in exactly one [Status]:
//
//   - [Success]: the effect was applied, once.
//   - [DefiniteFailure]: the effect was not applied.
//   - [UnknownOutcome]: the effect was applied at most once, and a record
//     awaits reconciliation.
//
// The [Envelope] carries the status with the request reference, the number of
// attempts, the result or an [Error], and [Next]: plain guidance the model can
// act on. Its JSON form is compact, stable and versioned ([Version]); the JSON
// Schema is in envelope.schema.json beside this file and is also available as
// [Schema].
//
// # Error classes
//
// A tool tells retrysafe what an error means for the effect with one of three
// classes:
//
//   - [Definite]: not applied, and retrying will not help (a 400, a rejected
//     address). Mark with [MarkDefinite].
//   - [Transient]: not applied, and retrying is safe (connection refused, 503).
//     Mark with [MarkTransient].
//   - [Unknown]: the effect may have been applied (a timeout after the request
//     was written, a reset connection, a 502). Mark with [MarkUnknown].
//
// Errors may also speak for themselves through behaviour interfaces found with
// errors.As: Definite() bool, SafeToRetry() bool (the pgx convention) and
// MaybeApplied() bool. [Classify] applies marks and interfaces first, then
// knows common Go errors (dial failures, DNS, context deadlines, resets,
// [HTTPError] statuses), and counts anything else as Unknown: the safe side.
//
// This package imports only the standard library.
package envelope
