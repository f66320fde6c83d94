package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// licenseMarkers identify the licenses found among cle's dependencies by a
// sentence each one's text carries. Every marker that a module's license
// files contain is declared, joined with AND (a module that ships several
// licenses is under all of them). The BSD markers are tested in order: a
// 3-clause text also carries the 2-clause one's sentence.
var licenseMarkers = []struct{ id, marker, unless string }{
	{id: "Apache-2.0", marker: "apache license"},
	{id: "MIT", marker: "permission is hereby granted, free of charge"},
	{id: "BSD-3-Clause", marker: "neither the name of"},
	{id: "BSD-2-Clause", marker: "redistribution and use in source and binary forms", unless: "neither the name of"},
	{id: "ISC", marker: "permission to use, copy, modify, and/or distribute this software for any"},
	{id: "MPL-2.0", marker: "mozilla public license version 2.0"},
}

// licenseFile reports whether a file at a module's root holds its license:
// LICENSE, LICENCE or COPYING, with any suffix (LICENSE.txt, LICENSE.MIT,
// LICENSE-APACHE), in any case.
func licenseFile(name string) bool {
	upper := strings.ToUpper(name)
	return strings.HasPrefix(upper, "LICENSE") || strings.HasPrefix(upper, "LICENCE") || strings.HasPrefix(upper, "COPYING")
}

// declaredLicense reads the license files of module path@version from the
// module cache (Go's own for "stdlib") and names their SPDX identifiers;
// NOASSERTION when the module is not in the cache or its text is none of
// licenseMarkers. The release builds the binaries just before, so every
// module they link is in the cache.
func declaredLicense(path, version string) string {
	var dir string
	if path == "stdlib" {
		dir = goEnv("GOROOT")
	} else if cache := goEnv("GOMODCACHE"); cache != "" {
		dir = filepath.Join(cache, escapeModulePath(path)+"@"+version)
	}
	if dir == "" {
		return "NOASSERTION"
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "NOASSERTION"
	}
	var text strings.Builder
	for _, e := range entries {
		if e.IsDir() || !licenseFile(e.Name()) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
			text.WriteString(strings.ToLower(strings.Join(strings.Fields(string(b)), " ")))
			text.WriteByte('\n')
		}
	}
	return classifyLicense(text.String())
}

// classifyLicense names the SPDX identifiers whose markers text (lower
// case, white space folded) contains.
func classifyLicense(text string) string {
	var ids []string
	for _, l := range licenseMarkers {
		if strings.Contains(text, l.marker) && (l.unless == "" || !strings.Contains(text, l.unless)) {
			ids = append(ids, l.id)
		}
	}
	if len(ids) == 0 {
		return "NOASSERTION"
	}
	slices.Sort(ids)
	return strings.Join(ids, " AND ")
}

var goEnvCache = map[string]string{}

func goEnv(name string) string {
	if v, ok := goEnvCache[name]; ok {
		return v
	}
	out, err := exec.Command("go", "env", name).Output()
	v := ""
	if err == nil {
		v = strings.TrimSpace(string(out))
	}
	goEnvCache[name] = v
	return v
}

// escapeModulePath is the module cache's spelling of a module path: each
// upper-case letter as '!' and its lower case.
func escapeModulePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
