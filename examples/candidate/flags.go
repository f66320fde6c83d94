package main

import (
	"flag"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/klog/v2"
)

// goflagSet holds klog's flags (-v, ...).
func goflagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}

func coordinationStrategy(s string) coordinationv1.CoordinatedLeaseStrategy {
	return coordinationv1.CoordinatedLeaseStrategy(s)
}
