package app

import (
	"context"
	"sync"

	"k8s.io/klog/v2"
)

// onceWarnings logs each distinct warning from the API server once (such as
// the deprecation notice on every LeaseCandidate request), instead of once
// per request.
type onceWarnings struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

func (w *onceWarnings) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	_, seen := w.seen[text]
	if !seen {
		if w.seen == nil {
			w.seen = map[string]struct{}{}
		}
		w.seen[text] = struct{}{}
	}
	w.mu.Unlock()
	if !seen {
		klog.FromContext(ctx).Info("Warning from the API server (logged once)", "warning", text)
	}
}
