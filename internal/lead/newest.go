package lead

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Newest bridges the lag between this process's writes and its informer: it
// keeps the object of the last write until the informer's store shows that
// write or something later. It remembers every resourceVersion known to be
// older than the write (what the store showed, and earlier writes), so that a
// store that is several writes behind never serves an older object.
type Newest[T metav1.Object] struct {
	written T
	has     bool
	older   map[string]bool
}

// Remember records written, the result of a write made while the store
// showed storeRV ("" when the store had no object).
func (n *Newest[T]) Remember(storeRV string, written T) {
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

// Pick returns the newer of the store's object and the last write. Once the
// store has caught up (or moved on), the write is forgotten. A store without
// the object is served as it is, but the write is kept: the store may not
// show this process's creation yet, and once it does, that older version
// must not be served over a later write.
func (n *Newest[T]) Pick(stored T, exists bool) (T, bool) {
	if !n.has || !exists {
		return stored, exists
	}
	if n.older[stored.GetResourceVersion()] {
		return n.written, true
	}
	var zero T
	n.written, n.has, n.older = zero, false, nil
	return stored, exists
}
