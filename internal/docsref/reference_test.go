package docsref

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const root = "../.."

// TestReferenceAnnotations: the table of annotations and labels lists every
// cle.dev/ key the code declares as an annotation or a label (a constant
// whose name ends in Annotation or Label), and no other.
func TestReferenceAnnotations(t *testing.T) {
	code := map[string]string{} // key -> where it is declared
	for _, c := range stringConsts(t) {
		if strings.HasPrefix(c.value, "cle.dev/") && (strings.HasSuffix(c.name, "Annotation") || strings.HasSuffix(c.name, "Label")) {
			code[c.value] = c.where
		}
	}
	if len(code) < 5 {
		t.Fatalf("found %d annotation and label constants in the code, want at least 5: is the scan broken?", len(code))
	}
	doc := tableKeys(t, section(t, "docs/reference.md", "## Annotations and labels"))
	compare(t, "docs/reference.md's annotations and labels", doc, code)
}

// TestReferenceCandidateFields: the LeaseCandidate table lists every field
// of the custom resource's spec, and no other.
func TestReferenceCandidateFields(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "manifests/crd/leasecandidates.cle.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]any
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatal("the CRD has no versions")
	}
	doc := tableKeys(t, section(t, "docs/reference.md", "## LeaseCandidate"))
	for _, v := range crd.Spec.Versions {
		fields := map[string]string{}
		for f := range v.Schema.OpenAPIV3Schema.Properties["spec"].Properties {
			fields["spec."+f] = "the CRD's " + v.Name
		}
		if len(fields) == 0 {
			t.Fatalf("the CRD's %s has no spec fields: is the parse broken?", v.Name)
		}
		compare(t, "docs/reference.md's LeaseCandidate fields", doc, fields)
	}
}

// TestReferenceEvents: the Events table of docs/operations.md and the list
// in docs/reference.md name every reason cle-controller records (the
// Reason constants of pkg/controller), and no other.
func TestReferenceEvents(t *testing.T) {
	code := map[string]string{}
	for _, c := range stringConsts(t) {
		if strings.HasPrefix(c.where, "pkg/controller/") && strings.HasPrefix(c.name, "Reason") {
			code[c.value] = c.where
		}
	}
	if len(code) < 5 {
		t.Fatalf("found %d Event reasons in pkg/controller, want at least 5: is the scan broken?", len(code))
	}
	compare(t, "docs/operations.md's Events table", tableKeys(t, section(t, "docs/operations.md", "## Events")), code)
	listed := map[string]bool{}
	// The section's first paragraph.
	paragraph := strings.SplitN(strings.TrimSpace(section(t, "docs/reference.md", "## Events and metrics")), "\n\n", 2)[0]
	for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(paragraph, -1) {
		listed[m[1]] = true
	}
	compare(t, "docs/reference.md's list of Events", listed, code)
}

// TestReferenceCandidateMetrics: the table of a candidate's metrics lists
// every metric pkg/candidate registers, and no other.
func TestReferenceCandidateMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "pkg/candidate/metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]string{}
	for _, m := range regexp.MustCompile(`"(cle_candidate_[a-z_]+)"`).FindAllStringSubmatch(string(data), -1) {
		code[m[1]] = "pkg/candidate/metrics.go"
	}
	if len(code) == 0 {
		t.Fatal("no cle_candidate_ metric names in pkg/candidate/metrics.go: is the scan broken?")
	}
	doc := map[string]bool{}
	for k := range tableKeys(t, section(t, "docs/reference.md", "## Events and metrics")) {
		doc[strings.SplitN(k, "{", 2)[0]] = true
	}
	compare(t, "docs/reference.md's candidate metrics", doc, code)
}

type stringConst struct{ name, value, where string }

// stringConsts returns the string constants declared in the root module's
// code (pkg/, internal/ and cmd/, tests left out).
func stringConsts(t *testing.T) []stringConst {
	t.Helper()
	var out []stringConst
	fset := token.NewFileSet()
	for _, dir := range []string{"pkg", "internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							return err
						}
						out = append(out, stringConst{name.Name, v, rel})
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// section returns the part of the document at path from the heading to the
// next heading of the same level or higher.
func section(t *testing.T, path, heading string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	body := text[start+len(heading)+2:]
	level := strings.SplitN(heading, " ", 2)[0]
	if end := regexp.MustCompile(`(?m)^#{1,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(body); end != nil {
		body = body[:end[0]]
	}
	return body
}

// tableKeys returns the code-quoted first cells of the table rows in text.
func tableKeys(t *testing.T, text string) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)`").FindAllStringSubmatch(text, -1) {
		keys[m[1]] = true
	}
	if len(keys) == 0 {
		t.Fatalf("no table rows found in:\n%s", text)
	}
	return keys
}

// compare reports what the code has that the document does not list, and
// what the document lists that the code does not have.
func compare(t *testing.T, what string, doc map[string]bool, code map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(code)) {
		if !doc[k] {
			t.Errorf("%s: %s (%s) is not listed", what, k, code[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if _, ok := code[k]; !ok {
			t.Errorf("%s: %s is listed, but the code has no such thing", what, k)
		}
	}
}
