package access

import (
	"k8s.io/apimachinery/pkg/api/meta"
)

// StripManagedFields is an informer transform (a cache.TransformFunc) for
// the informers of this package whose users never read managedFields: it
// drops them from every object before it is stored. They are most of what a
// watch sends of a Lease or a LeaseCandidate, and an election controller
// caching tens of thousands of both would spend most of its cache on them.
//
// Nothing else is dropped, and nothing else may be: the election controller
// and the candidate library write objects back from their informers' stores
// (a ping, a renewal, a hand-over), and an update without a field removes
// it. managedFields are the exception: kube-apiserver keeps the stored ones
// when an update leaves them out.
//
// It is not applied by default because some readers do want managedFields
// (tests tell who wrote an object by its field manager); it is idempotent,
// as client-go asks of a transform.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
