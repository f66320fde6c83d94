package candidate

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cle-dev/cle/internal/lead"
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
	written lead.Newest[T]
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
	t, ok := w.written.Pick(w.stored())
	if !ok {
		var zero T
		return zero
	}
	return t
}

// watchedObject is a watched object of any type, for runInformers.
type watchedObject interface {
	parts() (cache.SharedIndexInformer, cache.DoneChecker)
}

func (w *watched[T]) parts() (cache.SharedIndexInformer, cache.DoneChecker) {
	return w.informer, w.synced
}
