package framework

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/cle-dev/cle/pkg/shard"
)

// GroupBalanced says whether g is settled over exactly owners: every shard
// owned, none moving, and each owner holding its share (the counts differ by
// at most one); otherwise it says what it found.
func GroupBalanced(g shard.Group, owners ...string) (bool, string) {
	if g.Count == 0 || len(g.Moving) > 0 || g.Unowned() > 0 {
		return false, fmt.Sprintf("%d shards, %d moving, %d unowned; owners %s", g.Count, len(g.Moving), g.Unowned(), g.DescribeOwners())
	}
	counts := g.OwnerCounts()
	if len(counts) != len(owners) {
		return false, "owners " + g.DescribeOwners()
	}
	for _, o := range owners {
		if c := counts[o]; c < g.Count/len(owners) || c > (g.Count+len(owners)-1)/len(owners) {
			return false, "owners " + g.DescribeOwners()
		}
	}
	return true, ""
}

// StampedByOwners says whether every ConfigMap of cms (in namespace)
// carries, in annotation, the stamp of contrib/controller-runtime/examples/
// sharded by the owner of its shard under g's token of that shard (see
// ShardStamps); otherwise it says which does not.
func StampedByOwners(g shard.Group, namespace, annotation string, cms []corev1.ConfigMap) (bool, string) {
	for _, cm := range cms {
		s := shard.Of(namespace+"/"+cm.Name, g.Count)
		want := fmt.Sprintf("%s shard=%d token=%d", g.Owners[s].Member, s, g.Tokens[s])
		if got := cm.Annotations[annotation]; got != want {
			return false, fmt.Sprintf("%s stamped %q, want %q", cm.Name, got, want)
		}
	}
	return true, ""
}
