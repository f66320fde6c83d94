// Command pause is the sandbox ("pause") container of the node test's Pods:
// it holds a Pod's namespaces open until it is told to stop, and reaps the
// zombies it inherits as the Pod's PID 1 when the Pod shares its process
// namespace. The node test packs it into an image and imports it into
// containerd, which has no registry to pull the usual one from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
