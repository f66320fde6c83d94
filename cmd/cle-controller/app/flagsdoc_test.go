package app

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const (
	referenceDoc    = "../../../docs/reference.md"
	flagsTableBegin = "<!-- BEGIN flags table: generated from the binary's flags by `go test ./cmd/cle-controller/app -run TestFlagsTableInDocs -update` -->"
	flagsTableEnd   = "<!-- END flags table -->"
)

// flagsTable is a table of cle-controller's flags, sorted by name, with
// their defaults and help.
func flagsTable(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | default | what it does |\n| --- | --- | --- |\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		if t := f.Value.Type(); t != "bool" {
			name += " " + t
		}
		def := "-"
		if f.DefValue != "" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		usage := strings.Join(strings.Fields(f.Usage), " ")
		if f.Deprecated != "" {
			usage += " Deprecated: " + f.Deprecated
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, strings.ReplaceAll(usage, "|", `\|`))
	})
	return b.String()
}

// TestFlagsTableInDocs keeps the flags table of docs/reference.md the one
// cle-controller's flags make: a flag added, renamed, re-described or given
// another default without the table fails here (-update rewrites it).
func TestFlagsTableInDocs(t *testing.T) {
	fs := pflag.NewFlagSet("cle-controller", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	for _, want := range []string{"api-mode", "namespaces", "proof-of-death", "leader-elect", "v"} {
		if fs.Lookup(want) == nil {
			t.Errorf("--%s is not registered", want)
		}
	}
	checkGenerated(t, referenceDoc, flagsTableBegin, flagsTableEnd, flagsTable(fs), "TestFlagsTableInDocs")
}
