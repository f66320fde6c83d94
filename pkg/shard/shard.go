// Package shard owns the rules of shard groups: which shard an object belongs
// to, how a group's assignment is written on its Leases, and how cle-controller
// decides who owns each shard (docs/design.md, "Shard groups").
//
// Everything here is a pure function of its inputs: no clients, no clocks. The
// controller observes replicas and member Leases, says what it observed in an
// Input, and writes what Plan returns; the library reads the same encodings to
// learn which shards it may act on.
package shard

import (
	"hash/fnv"
	"math"
)

// MaxShards bounds a group's shard count so that its assignment fits in a
// Lease's annotations (256 KiB per object) with room to spare.
const MaxShards = 4096

// Of returns the shard of n (0 to n-1) that key belongs to. Every replica
// computes the same shard for a key without asking anybody, and when n changes
// to m only about |m-n|/max(m,n) of the keys move: a jump consistent hash
// (Lamping and Veach, 2014) of the key's 64-bit FNV-1a hash. n below 1 is taken
// as 1, and n above 2^31-1 (where the hash's arithmetic would overflow) as
// 2^31-1.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	n = min(n, math.MaxInt32)
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return jump(h.Sum64(), n)
}

// jump is the jump consistent hash: it follows the key's pseudo-random
// sequence of bucket changes as the bucket count grows, and returns the last
// bucket below n.
func jump(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
