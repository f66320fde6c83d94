package kubectlcle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/pkg/access"
)

// printerFor returns the Format kubectl cle's -o gives for output.
func printerFor(t *testing.T, output string) Format {
	t.Helper()
	f := Format{Output: output}
	if output == OutputTable || output == OutputWide {
		return f
	}
	pf := genericclioptions.NewPrintFlags("").WithTypeSetter(Scheme)
	pf.OutputFormat = ptr.To(output)
	p, err := pf.ToPrinter()
	if err != nil {
		t.Fatalf("-o %s: %v", output, err)
	}
	f.Printer = p
	return f
}

func sampleList() *LeaseStatusList {
	created := metav1.NewTime(now.Add(-time.Hour))
	rows := []LeaseStatus{
		{TypeMeta: typeMeta(KindLeaseStatus), Namespace: "ns", Name: "a", APIMode: access.ModeNative, Strategy: "OldestEmulationVersion", Holder: "h1", Best: "h1",
			Candidates: 2, Term: 3, State: StateOptimal, Why: "h1 holds it.", Created: &created, RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-2 * time.Second)))},
		{TypeMeta: typeMeta(KindLeaseStatus), Namespace: "other", Name: "b", APIMode: access.ModeNative, Candidates: 1, State: StateVacant, Best: "c", Why: "Nobody holds it."},
	}
	ctrl := &ElectionControllerStatus{Lock: "kube-system/leader-election-controller", State: ControllerActing, Controller: access.ActingKubeAPIServer,
		Holder: "apiserver-x", Since: ptr.To(metav1.NewTime(now.Add(-5 * time.Minute)))}
	return NewLeaseStatusList(rows, ctrl)
}

func TestPrintStatusTables(t *testing.T) {
	for _, tc := range []struct {
		name          string
		format        Format
		allNamespaces bool
		list          func(*LeaseStatusList)
		want          string
	}{
		{
			name:   "default",
			format: Format{},
			want: "" +
				"Election controller: kube-apiserver (holder apiserver-x), acting for 5m (kube-system/leader-election-controller)\n" +
				"LEASE   STRATEGY                 HOLDER   PREFERRED   BEST   CANDIDATES   TERM   STATE     AGE\n" +
				"a       OldestEmulationVersion   h1       <none>      h1     2            3      optimal   60m\n" +
				"b       <none>                   <none>   <none>      c      1            0      vacant    <none>\n",
		},
		{
			name:   "native mode, cle-controller beside kube-apiserver",
			format: Format{},
			list: func(l *LeaseStatusList) {
				l.ElectionController.CleStrategies = &ElectionControllerStatus{Lock: "kube-system/cle-controller", State: ControllerActing, Controller: access.ActingCle,
					Holder: "cle-a", Since: ptr.To(metav1.NewTime(now.Add(-2 * time.Minute)))}
			},
			want: "" +
				"Election controller: kube-apiserver (holder apiserver-x), acting for 5m (kube-system/leader-election-controller)\n" +
				"Election controller of cle.dev strategies: cle (holder cle-a), acting for 2m (kube-system/cle-controller)\n" +
				"LEASE   STRATEGY                 HOLDER   PREFERRED   BEST   CANDIDATES   TERM   STATE     AGE\n" +
				"a       OldestEmulationVersion   h1       <none>      h1     2            3      optimal   60m\n" +
				"b       <none>                   <none>   <none>      c      1            0      vacant    <none>\n",
		},
		{
			name:          "all namespaces, no headers",
			format:        Format{NoHeaders: true},
			allNamespaces: true,
			want: "" +
				"ns      a     OldestEmulationVersion   h1       <none>   h1    2     3     optimal   60m\n" +
				"other   b     <none>                   <none>   <none>   c     1     0     vacant    <none>\n",
		},
		{
			name:   "wide",
			format: Format{Output: OutputWide},
			want: "" +
				"Election controller: kube-apiserver (holder apiserver-x), acting for 5m (kube-system/leader-election-controller)\n" +
				"LEASE   STRATEGY                 HOLDER   PREFERRED   BEST   CANDIDATES   TERM   STATE     AGE      RENEWED   MODE     WHY\n" +
				"a       OldestEmulationVersion   h1       <none>      h1     2            3      optimal   60m      2s        native   h1 holds it.\n" +
				"b       <none>                   <none>   <none>      c      1            0      vacant    <none>   <none>    native   Nobody holds it.\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			list := sampleList()
			if tc.list != nil {
				tc.list(list)
			}
			if err := PrintStatus(&out, list, tc.format, tc.allNamespaces, now); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

func TestPrintStatusObjects(t *testing.T) {
	for _, tc := range []struct {
		output string
		check  func(t *testing.T, out string)
	}{
		{output: "json", check: func(t *testing.T, out string) {
			var got LeaseStatusList
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if got.APIVersion != "kubectl.cle.dev/v1alpha1" || got.Kind != "LeaseStatusList" {
				t.Errorf("apiVersion %q kind %q", got.APIVersion, got.Kind)
			}
			if len(got.Items) != 2 || got.Items[0].Kind != "LeaseStatus" || got.Items[0].APIVersion != "kubectl.cle.dev/v1alpha1" || got.Items[0].Holder != "h1" {
				t.Errorf("items %+v", got.Items)
			}
			if c := got.ElectionController; c == nil || c.Controller != "kube-apiserver" || c.State != ControllerActing {
				t.Errorf("electionController %+v", c)
			}
		}},
		{output: "yaml", check: func(t *testing.T, out string) {
			var got map[string]any
			if err := yaml.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if got["apiVersion"] != "kubectl.cle.dev/v1alpha1" || got["kind"] != "LeaseStatusList" {
				t.Errorf("got %v", got)
			}
		}},
		{output: "name", check: func(t *testing.T, out string) {
			if want := "lease.coordination.k8s.io/a\nlease.coordination.k8s.io/b\n"; out != want {
				t.Errorf("got %q, want %q", out, want)
			}
		}},
		{output: "jsonpath={.items[*].holder}", check: func(t *testing.T, out string) {
			if out != "h1" {
				t.Errorf("got %q", out)
			}
		}},
		{output: `jsonpath={range .items[*]}{.namespace}/{.name}={.state}{"\n"}{end}`, check: func(t *testing.T, out string) {
			if want := "ns/a=optimal\nother/b=vacant\n"; out != want {
				t.Errorf("got %q, want %q", out, want)
			}
		}},
		{output: `go-template={{.electionController.controller}}:{{range .items}} {{.name}}{{end}}`, check: func(t *testing.T, out string) {
			if want := "kube-apiserver: a b"; out != want {
				t.Errorf("got %q, want %q", out, want)
			}
		}},
	} {
		t.Run(tc.output, func(t *testing.T) {
			var out strings.Builder
			if err := PrintStatus(&out, sampleList(), printerFor(t, tc.output), false, now); err != nil {
				t.Fatal(err)
			}
			tc.check(t, out.String())
		})
	}
}

func TestPrintStatusEmpty(t *testing.T) {
	var out strings.Builder
	if err := PrintStatus(&out, NewLeaseStatusList(nil, nil), printerFor(t, "json"), false, now); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatal(err)
	}
	if items, ok := got["items"].([]any); !ok || len(items) != 0 {
		t.Errorf("items of an empty list: %#v, want []", got["items"])
	}
	out.Reset()
	if err := PrintStatus(&out, NewLeaseStatusList(nil, nil), Format{}, false, now); err != nil || out.Len() != 0 {
		t.Errorf("an empty table printed %q, %v", out.String(), err)
	}
}

func TestPrintDescription(t *testing.T) {
	list := sampleList()
	d := &LeaseDescription{TypeMeta: typeMeta(KindLeaseDescription), Status: list.Items[0], ElectionController: list.ElectionController,
		Candidates: []CandidateStatus{{Rank: 1, Name: "h1", BinaryVersion: "1.36.0", EmulationVersion: "1.36.0", Strategy: "OldestEmulationVersion", Roles: []string{"holder", "best"}}},
		Events:     []EventStatus{}}
	var out strings.Builder
	if err := PrintDescription(&out, d, Format{}, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Lease:                 ns/a\n",
		"Election controller:   kube-apiserver (holder apiserver-x), acting for 5m (kube-system/leader-election-controller)\n",
		"  1      h1     1.36.0      1.36.0   OldestEmulationVersion   <never>   <none>   holder,best\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe does not say %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := PrintDescription(&out, d, printerFor(t, "name"), now); err != nil || out.String() != "lease.coordination.k8s.io/a\n" {
		t.Errorf("-o name: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := PrintDescription(&out, d, printerFor(t, "json"), now); err != nil {
		t.Fatal(err)
	}
	var got LeaseDescription
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindLeaseDescription || got.APIVersion != "kubectl.cle.dev/v1alpha1" || got.Status.Name != "a" || got.ElectionController == nil {
		t.Errorf("-o json: %s", out.String())
	}
}
