package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/cle-dev/cle/pkg/access"
)

// TestNewInformersExceptFiltersAtTheServer pins that excluded namespaces are
// left out by the list and watch requests themselves (a field selector), so
// that the server never sends their objects.
func TestNewInformersExceptFiltersAtTheServer(t *testing.T) {
	noWatchList(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	var mu sync.Mutex
	selectors := map[string][]string{}
	record := func(action clienttesting.Action) (bool, runtime.Object, error) {
		var sel string
		switch a := action.(type) {
		case clienttesting.ListAction:
			sel = a.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			sel = a.GetWatchRestrictions().Fields.String()
		}
		mu.Lock()
		selectors[action.GetResource().Resource+" "+action.GetVerb()] = append(selectors[action.GetResource().Resource+" "+action.GetVerb()], sel)
		mu.Unlock()
		return false, nil, nil
	}
	client.PrependReactor("list", "*", record)
	client.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		_, _, _ = record(action)
		return false, nil, nil
	})
	inf := NewInformersExcept(access.NewNative(client), []string{"kube-node-lease", "other"}, 0)
	stopped := inf.Start(ctx)
	defer stopped()
	defer cancel()
	want := "metadata.namespace!=kube-node-lease,metadata.namespace!=other"
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(selectors) == 4, nil
	}); err != nil {
		t.Fatalf("list and watch of both resources not seen: %v", selectors)
	}
	mu.Lock()
	defer mu.Unlock()
	for req, sels := range selectors {
		for _, sel := range sels {
			if sel != want {
				t.Errorf("%s with field selector %q, want %q", req, sel, want)
			}
		}
	}
}
