package tools

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the values table of charts/cle/README.md from values.yaml")

const (
	valuesTableBegin = "<!-- BEGIN values table: generated from values.yaml by `(cd hack/tools/helm && go test -run TestValuesTable -update .)` -->"
	valuesTableEnd   = "<!-- END values table -->"
)

// valueDoc is a row of the values table: keys that one comment of
// values.yaml describes (a key and the uncommented siblings after it), their
// defaults, and the comment's first paragraph.
type valueDoc struct {
	keys, defaults []string
	text           string
}

var valuesKey = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)

// valueDocs reads values.yaml: a key with a comment above it starts a row,
// and a key without one joins the row of the commented sibling before it,
// or, with none, is shown in its parent's default. An object's default
// leaves out the keys that have rows of their own.
func valueDocs(t *testing.T, values []byte) []valueDoc {
	t.Helper()
	var all map[string]any
	if err := yaml.Unmarshal(values, &all); err != nil {
		t.Fatal(err)
	}
	var docs []valueDoc
	var comment, path []string
	rowAt := map[int]int{} // indentation depth -> the row its keys join
	sc := bufio.NewScanner(bytes.NewReader(values))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		m := valuesKey.FindStringSubmatch(line)
		text := firstParagraph(comment)
		comment = nil
		if m == nil {
			continue // a blank line (the file's own comment describes no key), or a value's continuation
		}
		depth := len(m[1]) / 2
		path = append(path[:min(depth, len(path))], m[2])
		for d := range rowAt {
			if d > depth {
				delete(rowAt, d)
			}
		}
		if text != "" {
			docs = append(docs, valueDoc{text: text})
			rowAt[depth] = len(docs) - 1
		}
		if i, ok := rowAt[depth]; ok {
			docs[i].keys = append(docs[i].keys, strings.Join(path, "."))
		}
	}
	rows := map[string]bool{}
	for _, d := range docs {
		for _, k := range d.keys {
			rows[k] = true
		}
	}
	for i := range docs {
		for _, k := range docs[i].keys {
			var v any = all
			for _, p := range strings.Split(k, ".") {
				v = v.(map[string]any)[p]
			}
			docs[i].defaults = append(docs[i].defaults, flowYAML(k, v, rows))
		}
	}
	return docs
}

// firstParagraph joins the comment's lines up to its first blank one.
func firstParagraph(lines []string) string {
	var out []string
	for _, l := range lines {
		if l == "" {
			break
		}
		out = append(out, l)
	}
	return strings.Join(strings.Fields(strings.Join(out, " ")), " ")
}

// flowYAML is v, the value of key, as flow YAML on one line, without the
// keys of an object that have rows of their own.
func flowYAML(key string, v any, rows map[string]bool) string {
	switch v := v.(type) {
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if !rows[key+"."+k] {
				parts = append(parts, k+": "+flowYAML(key+"."+k, v[k], rows))
			}
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		var parts []string
		for _, x := range v {
			parts = append(parts, flowYAML(key, x, rows))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		if v == "" {
			return `""`
		}
		return v
	default:
		return fmt.Sprint(v)
	}
}

// markdownText escapes what a table cell would not show as written.
var markdownText = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;")

func valuesTable(docs []valueDoc) string {
	var b strings.Builder
	b.WriteString("| value | default | what it does |\n| --- | --- | --- |\n")
	quote := func(xs []string) string {
		var q []string
		for _, x := range xs {
			q = append(q, "`"+strings.ReplaceAll(x, "|", `\|`)+"`")
		}
		return strings.Join(q, ", ")
	}
	for _, d := range docs {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", quote(d.keys), quote(d.defaults), markdownText.Replace(d.text))
	}
	return b.String()
}

// TestValuesTable keeps the values table of the chart's README the one its
// values.yaml makes: every value with its default and the first paragraph
// of its comment. A value added, renamed, given another default or
// re-described without the table fails here (go test -run TestValuesTable -update
// rewrites it).
func TestValuesTable(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := valueDocs(t, values)
	// Every key of values.yaml is in a row, or in its parent's default.
	var all map[string]any
	if err := yaml.Unmarshal(values, &all); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, d := range docs {
		for _, k := range d.keys {
			shown[k] = true
		}
	}
	for k := range all {
		if !shown[k] {
			t.Errorf("values.yaml's %s has no comment, nor a commented sibling before it", k)
		}
	}
	readme := filepath.Join(chart, "README.md")
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	from, to := strings.Index(doc, valuesTableBegin), strings.Index(doc, valuesTableEnd)
	if from < 0 || to < from {
		t.Fatalf("%s has nothing between %q and %q", readme, valuesTableBegin, valuesTableEnd)
	}
	want := valuesTableBegin + "\n" + valuesTable(docs) + valuesTableEnd
	if doc[from:to+len(valuesTableEnd)] == want {
		return
	}
	if *update {
		if err := os.WriteFile(readme, []byte(doc[:from]+want+doc[to+len(valuesTableEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the values table of charts/cle/README.md is not values.yaml's; run (cd hack/tools/helm && go test -run TestValuesTable -update .)\n--- want\n%s", want)
}
