package app

import (
	"fmt"
	"slices"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

// trimCaches makes the controller's informers store objects without
// managedFields, which the controller never reads: at 10,000 Leases with
// three candidates each they are most of its cache. The informers must not
// have started.
func trimCaches(inf controller.Informers) error {
	for _, i := range slices.Concat(inf.Leases, inf.Candidates) {
		if err := i.SetTransform(access.StripManagedFields); err != nil {
			return fmt.Errorf("trim the informer caches: %w", err)
		}
	}
	return nil
}
