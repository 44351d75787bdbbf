// Package replicatest holds the multi-replica test of the product's
// promise (TestOneEffectPerActionAcrossReplicasAndRestarts): several real
// processes of an MCP server whose tool is guarded by retrysafe, sharing
// one PostgreSQL, behind a round-robin client; a scripted model that sends
// resends and rewordings; a destination that counts effects; and faults
// that kill, restart and pause replicas mid-call. See docs/testing.md.
//
// The package has no code outside its tests.
package replicatest
