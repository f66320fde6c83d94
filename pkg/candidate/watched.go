package candidate

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// watched is one object this process both watches and writes (its Lease or
// its LeaseCandidate): the informer's copy, bridged with its own last write.
type watched[T metav1.Object] struct {
	informer cache.SharedIndexInformer
	// synced is done once the informer has delivered its initial list.
	synced cache.DoneChecker
	key    string
	// written is the result of our last write, served instead of the
	// informer's object until the informer catches up with it.
	written newest[T]
}

// stored is the object in the informer's store.
func (w *watched[T]) stored() (T, bool) {
	var zero T
	obj, exists, err := w.informer.GetStore().GetByKey(w.key)
	if err != nil || !exists {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// current is the newest object known, the zero T (nil) if there is none.
func (w *watched[T]) current() T {
	t, ok := w.written.pick(w.stored())
	if !ok {
		var zero T
		return zero
	}
	return t
}

// newest bridges the lag between this process's writes and its informer: it
// keeps the object of the last write until the informer's store shows that
// write or something later. It remembers every resourceVersion known to be
// older than the write (what the store showed, and earlier writes), so that a
// store that is several writes behind never serves an older object.
type newest[T metav1.Object] struct {
	written T
	has     bool
	older   map[string]bool
}

// remember records written, the result of a write made while the store
// showed storeRV ("" when the store had no object).
func (n *newest[T]) remember(storeRV string, written T) {
	if n.older == nil {
		n.older = map[string]bool{}
	}
	if storeRV != "" {
		n.older[storeRV] = true
	}
	if n.has {
		n.older[n.written.GetResourceVersion()] = true
	}
	n.written, n.has = written, true
}

// pick returns the newer of the store's object and the last write. Once the
// store has caught up (or moved on, or lost the object), the write is
// forgotten.
func (n *newest[T]) pick(stored T, exists bool) (T, bool) {
	if !n.has {
		return stored, exists
	}
	if exists && n.older[stored.GetResourceVersion()] {
		return n.written, true
	}
	var zero T
	n.written, n.has, n.older = zero, false, nil
	return stored, exists
}
