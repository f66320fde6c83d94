package docsnippets

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A Go snippet of the docs is a fenced go block preceded by a comment that
// says what it is the body of, with the names it uses but does not declare:
//
//	<!-- go: func(ctx context.Context, restConfig *rest.Config) error -->
//
// In it, "{...}" stands for fields left out and a line "..." for statements
// left out; a line "import name "path"" imports a package. The test wraps
// the body in that function, imports the packages it names (imports),
// builds it in the module of the code it uses, and reports the compiler's
// errors at the document's lines.
var signature = regexp.MustCompile(`^<!-- go: (func\(.*\).*?) -->$`)

// imports are the packages snippets may name, by the name they use.
var imports = map[string]string{
	"context":        "context",
	"errors":         "errors",
	"fmt":            "fmt",
	"time":           "time",
	"candidate":      "github.com/cle-dev/cle/pkg/candidate",
	"lock":           "github.com/cle-dev/cle/pkg/lock",
	"fence":          "github.com/cle-dev/cle/pkg/fence",
	"kubernetes":     "k8s.io/client-go/kubernetes",
	"rest":           "k8s.io/client-go/rest",
	"leaderelection": "k8s.io/client-go/tools/leaderelection",
	"metav1":         "k8s.io/apimachinery/pkg/apis/meta/v1",
	"runtime":        "k8s.io/apimachinery/pkg/runtime",
	"ctrl":           "sigs.k8s.io/controller-runtime",
	"manager":        "sigs.k8s.io/controller-runtime/pkg/manager",
	"builder":        "sigs.k8s.io/controller-runtime/pkg/builder",
	"reconcile":      "sigs.k8s.io/controller-runtime/pkg/reconcile",
	"corev1":         "k8s.io/api/core/v1",
}

// docs are the documents whose snippets are built, as globs from the
// repository's root.
var docs = []string{"README.md", "docs/*.md", "examples/*.md", "contrib/controller-runtime/*.md"}

type snippet struct {
	doc       string // path from the repository's root
	line      int    // the document's line of the body's first line
	signature string
	body      []string
}

var (
	codeFence   = regexp.MustCompile("^```")
	qualified   = regexp.MustCompile(`\b([a-z][A-Za-z0-9]*)\.[A-Z]`)
	importLine  = regexp.MustCompile(`^import ([A-Za-z0-9_]+ )?"([^"]+)"$`)
	declaration = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:, *[A-Za-z_][A-Za-z0-9_]*)*) :=`)
)

// snippets reads the Go snippets of a document. A go block without a
// signature comment is an error, so that none is left unbuilt.
func snippets(t *testing.T, root, doc string) []snippet {
	t.Helper()
	f, err := os.Open(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var prev string
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && codeFence.MatchString(line):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body = append(cur.body, line)
		case line == "```go":
			m := signature.FindStringSubmatch(prev)
			if m == nil {
				t.Errorf("%s:%d: a go block with no <!-- go: func(...) --> comment before it to say what it is the body of", doc, n)
				m = []string{"", "func()"}
			}
			cur = &snippet{doc: doc, line: n + 1, signature: m[1]}
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// source is the snippet as a Go file of package main, and the file's line
// of the body's first line.
func (s snippet) source() (string, int) {
	named := map[string]string{} // name -> import path
	var body []string
	for _, l := range s.body {
		if m := importLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			name := strings.TrimSpace(m[1])
			if name == "" {
				name = filepath.Base(m[2])
			}
			named[name] = m[2]
			body = append(body, "") // keeps the lines where they are
			continue
		}
		if strings.TrimSpace(l) == "..." {
			l = ""
		}
		body = append(body, strings.ReplaceAll(l, "{...}", "{}"))
	}
	code := s.signature + "\n" + strings.Join(body, "\n")
	for _, m := range qualified.FindAllStringSubmatch(code, -1) {
		if path, ok := imports[m[1]]; ok && named[m[1]] == "" {
			named[m[1]] = path
		}
	}
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, name := range slices.Sorted(maps.Keys(named)) {
		fmt.Fprintf(&b, "\t%s %q\n", name, named[name])
	}
	b.WriteString(")\n\nfunc main() {}\n\nvar _ = " + s.signature + " {\n")
	first := strings.Count(b.String(), "\n") + 1
	b.WriteString(strings.Join(body, "\n") + "\n")
	// What the snippet's own statements declare may be left unused, as a
	// reader would use it later.
	for _, l := range body {
		if m := declaration.FindStringSubmatch(l); m != nil {
			for _, name := range strings.Split(m[1], ",") {
				if name = strings.TrimSpace(name); name != "_" {
					fmt.Fprintf(&b, "\t_ = %s\n", name)
				}
			}
		}
	}
	if strings.Contains(s.signature, ") error") {
		b.WriteString("\treturn nil\n")
	}
	b.WriteString("}\n")
	return b.String(), first
}

// TestSnippetsBuild builds every Go snippet of the README and docs/ in the
// module of the code it uses.
func TestSnippetsBuild(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var all []snippet
	for _, glob := range docs {
		matches, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			doc, _ := filepath.Rel(root, m)
			all = append(all, snippets(t, root, doc)...)
		}
	}
	if len(all) < 5 {
		t.Fatalf("found %d Go snippets, want the README's and the docs' (5 or more)", len(all))
	}
	// One package per module, a file per snippet, built at once.
	modules := map[string][]snippet{}
	for _, s := range all {
		module := root
		if src, _ := s.source(); strings.Contains(src, `"sigs.k8s.io/controller-runtime`) {
			module = filepath.Join(root, "contrib", "controller-runtime")
		}
		modules[module] = append(modules[module], s)
	}
	for module, ss := range modules {
		// A directory of its own per snippet (each is a main package whose
		// names may repeat another's), all built at once.
		dirs := map[string]snippet{}
		args := []string{"build", "-trimpath", "-gcflags=all=-dwarf=false", "-o", os.DevNull}
		for _, s := range ss {
			dir, err := os.MkdirTemp(module, ".snippet-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			src, _ := s.source()
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			dirs[filepath.Base(dir)] = s
			args = append(args, "./"+filepath.Base(dir))
		}
		// Built as make release builds, whose compiled packages it shares.
		cmd := exec.Command("go", args...)
		cmd.Dir = module
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the snippets do not build (%v):\n%s", err, docLines(string(out), dirs))
		}
	}
}

var compilerLine = regexp.MustCompile(`(?:\./)?(\.snippet-[0-9]+)/main\.go:(\d+):(\d+)`)

// docLines rewrites the compiler's positions in the snippets' files as the
// documents' lines.
func docLines(out string, dirs map[string]snippet) string {
	return compilerLine.ReplaceAllStringFunc(out, func(m string) string {
		sub := compilerLine.FindStringSubmatch(m)
		s, ok := dirs[sub[1]]
		if !ok {
			return m
		}
		_, first := s.source()
		n, _ := strconv.Atoi(sub[2])
		if n < first || n >= first+len(s.body) {
			return m
		}
		return fmt.Sprintf("%s:%d:%s", s.doc, s.line+n-first, sub[3])
	})
}
