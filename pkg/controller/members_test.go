package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/shard"
)

// memberLease is the member Lease of replica in the test group: held by it
// in epoch (renewed at renewed) unless released, recording highest and the
// shards it acts on.
func memberLease(replica string, epoch int32, held bool, renewed time.Time, highest int64, acting map[int]int64) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: shard.MemberLeaseName(testLease, replica), UID: types.UID("uid-member-" + replica), ResourceVersion: "1",
			Annotations: map[string]string{
				shard.GroupAnnotation:  testLease,
				shard.ActingAnnotation: shard.Acting{Count: 4, Highest: highest, Shards: acting}.Encode(),
			},
		},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To(epoch),
			RenewTime: &metav1.MicroTime{Time: renewed},
		},
	}
	if held {
		l.Spec.HolderIdentity = ptr.To(replica)
	}
	return l
}

// groupLease is the test group's Lease: shards 0-1 owned by a, 2-3 by b.
func groupLease(t *testing.T, tokens ...int64) *coordinationv1.Lease {
	t.Helper()
	a, b := shard.Owner{Member: "a", Epoch: 1}, shard.Owner{Member: "b", Epoch: 1}
	ann, err := shard.Group{Generation: 3, Count: 4, Owners: []shard.Owner{a, a, b, b}, Tokens: tokens}.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	name := shard.StrategyShards
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease, UID: "uid-lease", ResourceVersion: "1", Annotations: ann},
		Spec:       coordinationv1.LeaseSpec{Strategy: (*coordinationv1.CoordinatedLeaseStrategy)(&name)},
	}
}

// TestDepartedMemberLeases holds the deletion of a departed replica's member
// Lease to its rules: no LeaseCandidate, its epoch ended, no shard named
// for it, and its highest token recorded as high on a replica that stays.
func TestDepartedMemberLeases(t *testing.T) {
	leasesGR := schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}
	for _, tc := range []struct {
		name string
		// cHeld: c's epoch still runs; cCandidate: c still has its
		// LeaseCandidate; cHighest and aHighest: the highest tokens their
		// member Leases record; keep: the controller runs with
		// KeepDepartedMembers; forbidden: the server refuses deletes.
		cHeld, cCandidate, keep, forbidden bool
		cHighest, aHighest                 int64
		deleted                            bool
	}{
		{name: "left for good", cHighest: 5, aHighest: 6, deleted: true},
		{name: "its highest token recorded nowhere else", cHighest: 7, aHighest: 6},
		{name: "as high, not higher", cHighest: 6, aHighest: 6, deleted: true},
		{name: "epoch not ended", cHeld: true, cHighest: 5, aHighest: 6},
		{name: "still a candidate", cCandidate: true, cHighest: 5, aHighest: 6},
		{name: "kept by the option", keep: true, cHighest: 5, aHighest: 6},
		{name: "not allowed", forbidden: true, cHighest: 5, aHighest: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.KeepDepartedMembers = tc.keep })
			if tc.forbidden {
				h.failOn("delete", "leases", -1, apierrors.NewForbidden(leasesGR, "lease.c", fmt.Errorf("RBAC: no delete")))
			}
			now := h.clock.Now()
			cands := []*coordinationv1beta1.LeaseCandidate{
				candidate("a", "1.36.0", "1.36.0", withStrategy(shard.StrategyShards), withAnnotation(shard.DeclaredAnnotation, "4")),
				candidate("b", "1.36.0", "1.36.0", withStrategy(shard.StrategyShards), withAnnotation(shard.DeclaredAnnotation, "4")),
			}
			if tc.cCandidate {
				cands = append(cands, candidate("c", "1.36.0", "1.36.0", withStrategy(shard.StrategyShards), withAnnotation(shard.DeclaredAnnotation, "4")))
			}
			h.join(cands...)
			h.create(
				groupLease(t, tc.aHighest, tc.aHighest-1, 3, 3),
				memberLease("a", 1, true, now, tc.aHighest, map[int]int64{0: tc.aHighest, 1: tc.aHighest - 1}),
				memberLease("b", 1, true, now, 3, map[int]int64{2: 3, 3: 3}),
				memberLease("c", 1, tc.cHeld, now, tc.cHighest, nil),
			)
			h.reconcile()
			// Once more: a step after a refused delete does not ask again.
			h.reconcile()
			_, err := h.client.Tracker().Get(leasesGVR, testNS, shard.MemberLeaseName(testLease, "c"))
			if gone := apierrors.IsNotFound(err); gone != tc.deleted {
				t.Errorf("c's member Lease deleted: %v (%v), want %v", gone, err, tc.deleted)
			}
			deletes := 0
			for _, a := range h.client.Actions() {
				if a.GetVerb() == "delete" && a.GetResource().Resource == "leases" {
					deletes++
				}
			}
			want := 0
			if tc.deleted || tc.forbidden {
				want = 1
			}
			if deletes != want {
				t.Errorf("%d deletes of Leases, want %d", deletes, want)
			}
			for _, name := range []string{"a", "b"} {
				if _, err := h.client.Tracker().Get(leasesGVR, testNS, shard.MemberLeaseName(testLease, name)); err != nil {
					t.Errorf("%s's member Lease: %v", name, err)
				}
			}
			sawEvent := false
			for len(h.rec.Events) > 0 {
				if ev := <-h.rec.Events; strings.Contains(ev, ReasonMemberLeaseDeleted) {
					sawEvent = true
				}
			}
			if sawEvent != tc.deleted {
				t.Errorf("%s Event: %v, want %v", ReasonMemberLeaseDeleted, sawEvent, tc.deleted)
			}
		})
	}
}
