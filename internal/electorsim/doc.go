// Package electorsim holds the elector simulation, and nothing else: its
// tests run client-go's real LeaderElector over pkg/lock's Lock, the
// candidate library and replicas of the whole cle-controller process in a
// testing/synctest bubble's virtual time, against a model API server
// (TestRealElectorsUnderFaults, and TestRealShardGroupsUnderFaults for a
// shard group; docs/testing.md, "The elector simulation"). It is a package of its own so that the test imports of
// cle-controller stay out of the module graph of pkg/lock's users.
package electorsim
