package app

import (
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/version"
	"github.com/cle-dev/cle/pkg/kubectlcle"
)

func streams() (genericiooptions.IOStreams, *strings.Builder, *strings.Builder) {
	var out, errOut strings.Builder
	return genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, &out, &errOut
}

func find(t *testing.T, root *cobra.Command, name string) *cobra.Command {
	t.Helper()
	cmd, _, err := root.Find([]string{name})
	if err != nil || cmd.Name() != name {
		t.Fatalf("no subcommand %s: %v", name, err)
	}
	return cmd
}

// TestNoVersionFlag: -v is klog's verbosity, and the version is a
// subcommand: there is no --version flag.
func TestNoVersionFlag(t *testing.T) {
	s, _, errOut := streams()
	if code := Main(context.Background(), []string{"--version"}, s); code == 0 || !strings.Contains(errOut.String(), "unknown flag: --version") {
		t.Errorf("--version: exit %d, stderr %q", code, errOut.String())
	}
	root := NewCommand(s)
	v := root.PersistentFlags().Lookup("v")
	if v == nil || v.Shorthand != "v" || !strings.Contains(v.Usage, "log level verbosity") {
		t.Fatalf("-v is not klog's verbosity: %+v", v)
	}
	if root.PersistentFlags().Lookup("vmodule") == nil {
		t.Error("no --vmodule")
	}
}

// TestVerbosity: -v=4 sets klog's verbosity for the run.
func TestVerbosity(t *testing.T) {
	level := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(level)
	t.Cleanup(func() { _ = level.Set("v", "0") })

	s, out, _ := streams()
	if code := Main(context.Background(), []string{"-v=4", "version"}, s); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !klog.V(4).Enabled() || klog.V(5).Enabled() {
		t.Errorf("-v=4 did not set klog's verbosity to 4")
	}
	if !strings.HasPrefix(out.String(), "kubectl-cle ") {
		t.Errorf("version with -v=4: %q", out.String())
	}
}

func TestVersionCommand(t *testing.T) {
	want := version.Get()
	s, out, _ := streams()
	if code := Main(context.Background(), []string{"version"}, s); code != 0 || out.String() != "kubectl-cle "+want.String()+"\n" {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
	s, out, _ = streams()
	if code := Main(context.Background(), []string{"version", "-o", "json"}, s); code != 0 {
		t.Fatalf("version -o json: exit %d", code)
	}
	var got version.Info
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || got != want {
		t.Errorf("version -o json: %q, %v; want %+v", out.String(), err, want)
	}
	s, out, _ = streams()
	if code := Main(context.Background(), []string{"version", "-o", "yaml"}, s); code != 0 || !strings.Contains(out.String(), "goVersion: "+want.GoVersion+"\n") {
		t.Errorf("version -o yaml: exit %d, %q", code, out.String())
	}
	s, _, errOut := streams()
	if code := Main(context.Background(), []string{"version", "-o", "wide"}, s); code == 0 || !strings.Contains(errOut.String(), `unsupported output format "wide"`) {
		t.Errorf("version -o wide: exit %d, %q", code, errOut.String())
	}
}

// TestOutputFormats: each command takes kubectl's -o formats, and its own.
func TestOutputFormats(t *testing.T) {
	for _, tc := range []struct {
		command string
		args    []string
		printer bool   // a cli-runtime printer prints
		wantErr string // the format is refused
	}{
		{command: "status", args: nil},
		{command: "status", args: []string{"-o", "wide"}},
		{command: "status", args: []string{"-o", "json"}, printer: true},
		{command: "status", args: []string{"-o", "yaml"}, printer: true},
		{command: "status", args: []string{"-o", "name"}, printer: true},
		{command: "status", args: []string{"-o", "jsonpath={.items[*].holder}"}, printer: true},
		{command: "status", args: []string{"-o", "jsonpath-file=/nonexistent"}, wantErr: "/nonexistent"},
		{command: "status", args: []string{"-o", "go-template={{.kind}}"}, printer: true},
		{command: "status", args: []string{"--template", "{{.kind}}"}, printer: true},
		{command: "status", args: []string{"-o", "go-template-file=/nonexistent"}, wantErr: "/nonexistent"},
		{command: "status", args: []string{"-o", "jsonpath={.items[*"}, wantErr: "error parsing jsonpath"},
		{command: "status", args: []string{"-o", "table"}, wantErr: `output format "table", allowed formats are: wide,json,`},
		{command: "describe", args: []string{"-o", "yaml"}, printer: true},
		{command: "describe", args: []string{"-o", "name"}, printer: true},
		{command: "describe", args: []string{"-o", "wide"}, wantErr: "allowed formats are: json,"},
		{command: "watch", args: nil},
		{command: "watch", args: []string{"-o", "json"}, printer: true},
		{command: "watch", args: []string{"-o", "go-template={{.lease.name}}"}, printer: true},
		{command: "watch", args: []string{"-o", "wide"}, wantErr: "allowed formats are: json,"},
	} {
		t.Run(tc.command+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			s, _, _ := streams()
			o := NewOptions(s)
			root := o.command()
			cmd := find(t, root, tc.command)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			f, err := o.format(tc.command, ownFormats(tc.command)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (f.Printer != nil) != tc.printer {
				t.Errorf("printer %T, want one: %v", f.Printer, tc.printer)
			}
		})
	}
}

// ownFormats are the formats beyond the default a command prints itself.
func ownFormats(command string) []string {
	if command == "status" {
		return []string{kubectlcle.OutputWide}
	}
	return nil
}

// TestFlags: which command has which kubectl-like flag, and which completes
// Lease names.
func TestFlags(t *testing.T) {
	s, _, _ := streams()
	root := NewCommand(s)
	for _, tc := range []struct {
		command  string
		flags    []string // name/shorthand
		absent   []string
		complete bool
	}{
		{command: "status", flags: []string{"all-namespaces/A", "selector/l", "include-node-leases/", "no-headers/", "output/o", "template/", "allow-missing-template-keys/"}, complete: true},
		{command: "describe", flags: []string{"output/o", "template/"}, absent: []string{"no-headers", "selector", "all-namespaces"}, complete: true},
		{command: "watch", flags: []string{"all-namespaces/A", "selector/l", "include-node-leases/", "output/o"}, absent: []string{"no-headers"}, complete: true},
		{command: "version", flags: []string{"output/o"}, absent: []string{"selector"}},
	} {
		cmd := find(t, root, tc.command)
		for _, f := range tc.flags {
			name, short, _ := strings.Cut(f, "/")
			got := cmd.Flags().Lookup(name)
			if got == nil || got.Shorthand != short {
				t.Errorf("%s --%s: %+v, want shorthand %q", tc.command, name, got, short)
			}
		}
		for _, name := range tc.absent {
			if cmd.Flags().Lookup(name) != nil {
				t.Errorf("%s has --%s", tc.command, name)
			}
		}
		if got := cmd.ValidArgsFunction != nil; got != tc.complete {
			t.Errorf("%s completes arguments: %v, want %v", tc.command, got, tc.complete)
		}
	}
	for _, name := range []string{"kubeconfig", "namespace", "context", "as", "api-mode", "v", "vmodule"} {
		if root.PersistentFlags().Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
}

// TestLeaseArgument: a Lease name goes with neither -A nor -l.
func TestLeaseArgument(t *testing.T) {
	for _, args := range [][]string{{"status", "x", "-A"}, {"status", "x", "-l", "a=b"}, {"watch", "x", "-A"}} {
		s, _, errOut := streams()
		if code := Main(context.Background(), append(args, "--kubeconfig", "/nonexistent"), s); code == 0 || !strings.Contains(errOut.String(), "a Lease name cannot be given with") {
			t.Errorf("%v: exit %d, %q", args, code, errOut.String())
		}
	}
	s, _, errOut := streams()
	if code := Main(context.Background(), []string{"status", "-l", "a b", "--kubeconfig", "/nonexistent"}, s); code == 0 || !strings.Contains(errOut.String(), "invalid --selector") {
		t.Errorf("bad selector: exit %d, %q", code, errOut.String())
	}
}
