// Package dbostool runs a guarded tool (agenttool.Tool) as a DBOS step
// (github.com/dbos-inc/dbos-transact-golang): every run of the step, its
// retries and its re-execution when DBOS recovers a workflow meet the same
// action under the same key, and the step's outcome is the envelope.
package dbostool
