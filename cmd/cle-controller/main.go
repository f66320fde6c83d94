// Command cle-controller runs cle's coordinated leader election controller.
package main

import (
	"os"

	"github.com/cle-dev/cle/cmd/cle-controller/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr))
}
