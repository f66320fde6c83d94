package app

import (
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func TestOnceWarnings(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	w := &onceWarnings{}
	for range 3 {
		w.HandleWarningHeaderWithContext(ctx, 299, "", "v1beta1 is deprecated")
	}
	w.HandleWarningHeaderWithContext(ctx, 299, "", "something else")
	w.HandleWarningHeaderWithContext(ctx, 199, "", "not a warning code") // ignored
	w.HandleWarningHeaderWithContext(ctx, 299, "", "")

	out := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(out, "v1beta1 is deprecated"); n != 1 {
		t.Errorf("deprecation warning logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "something else") || strings.Contains(out, "not a warning code") {
		t.Errorf("log = %s, want the second distinct warning and not the non-299 one", out)
	}
}
