package kubectlcle

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/kubectlcle"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

// startReplica runs a replica of a shard group of the library until the
// test ends.
func startReplica(t *testing.T, m apiMode, ns, group, id string, count int) {
	t.Helper()
	framework.RunGroup(t, candidate.GroupConfig{
		Config: candidate.Config{RestConfig: m.server.Config(), APIMode: m.name, Namespace: ns, LeaseName: group, Identity: id,
			BinaryVersion: "1.36.0", Strategy: shard.StrategyShards,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond},
		Shards: count,
	})
}

// TestGroup: status shows a shard group's Lease in the state group, and
// describe its members, each with the shards the group grants it and what
// its member Lease says, and the shards' tokens.
func TestGroup(t *testing.T) {
	forEachMode(t, func(t *testing.T, m apiMode) {
		ns := m.server.CreateNamespace(t)
		m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name,
			Controller: controller.Options{LeaseDuration: 4 * time.Second}})
		kc := kubeconfig(t, m)
		startReplica(t, m, ns, "sharded", "r-a", 6)
		startReplica(t, m, ns, "sharded", "r-b", 6)

		var d kubectlcle.LeaseDescription
		poll(t, "the group assigned, and acted on as assigned", 30*time.Second, func() (bool, string) {
			// Until the replicas have registered, there is nothing to
			// describe yet.
			var buf framework.SyncBuffer
			if stderr, code := plugin(context.Background(), t, kc, ns, &buf, "describe", "sharded", "-o", "json"); code != 0 {
				return false, stderr
			}
			out := buf.String()
			d = kubectlcle.LeaseDescription{}
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				t.Fatal(err)
			}
			g := d.Group
			if g == nil || g.Count != 6 || g.Owned != 6 || g.Spread != 0 || len(g.Members) != 2 {
				return false, out
			}
			for _, m := range g.Members {
				if m.Owned != 3 || m.Acting != m.Shards || m.LeaseEpoch != 1 || m.Epoch != 1 || m.Declared != "6" {
					return false, out
				}
			}
			return true, out
		})
		if len(d.Candidates) != 2 || d.Candidates[0].Roles[0] != "member" {
			t.Errorf("describe -o json: candidates %+v", d.Candidates)
		}
		out := strings.Join(strings.Fields(run(t, kc, ns, "describe", "sharded")), " ")
		for _, want := range []string{"State: group", "Shards: 6 (generation", "6 owned, 0 moving, 0 unowned, spread 0",
			"NAME EPOCH OWNED SHARDS ACTING RELEASED MEMBER LEASE DECLARED", "r-a 1 3 ", "epoch 1, renewed", "SHARDS TOKEN"} {
			if !strings.Contains(out, want) {
				t.Errorf("describe lacks %q: %s", want, out)
			}
		}
		rows := statusOf(t, kc, ns)
		if len(rows) != 1 || rows[0].Name != "sharded" || rows[0].State != kubectlcle.StateGroup {
			t.Errorf("status: %+v", rows)
		}
	})
}
