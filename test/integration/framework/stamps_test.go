package framework

import (
	"slices"
	"testing"
)

func TestShardStamps(t *testing.T) {
	var s ShardStamps
	for _, st := range [][2]string{
		{"o1", "a shard=1 token=3"},
		{"o1", "a shard=1 token=3"}, // the same stamp again: a resync, not a write
		{"o1", "b shard=1 token=4"}, // a new grant
		{"o1", "a shard=1 token=3"}, // the deposed owner over its successor
		{"o2", "a shard=2 token=5"},
		{"o2", "c shard=2 token=5"}, // two replicas under one grant
		{"o3", "not a stamp"},
	} {
		s.See(st[0], st[1])
	}
	stamps, problems := s.Result()
	want := []string{"o1 stamped by a with token 3 after b's token 4", "o2 stamped by a and c under one token 5"}
	if stamps != 6 || !slices.Equal(problems, want) {
		t.Errorf("Result() = %d, %q; want 6, %q", stamps, problems, want)
	}
}
