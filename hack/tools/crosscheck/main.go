// Command crosscheck type-checks packages, and every package they import,
// from source for other platforms than the one it runs on: what a build for
// that platform would reject as code (a name a platform's files lack, a
// signature that differs), at a small part of a build's cost, since nothing is
// compiled. make release runs it for the platforms a release was asked to
// leave out (PLATFORMS, hack/release.sh), so that a release built for one
// platform still answers for the others.
//
//	crosscheck -platform darwin/arm64 -platform windows/amd64 ./cmd/kubectl-cle
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
)

type platformList []string

func (p *platformList) String() string { return strings.Join(*p, ",") }

func (p *platformList) Set(v string) error {
	goos, goarch, ok := strings.Cut(v, "/")
	if !ok || goos == "" || goarch == "" {
		return fmt.Errorf("want os/arch, got %q", v)
	}
	*p = append(*p, v)
	return nil
}

func main() {
	var platforms platformList
	flag.Var(&platforms, "platform", "a platform to check, os/arch (repeatable)")
	dir := flag.String("C", ".", "the directory the package patterns are relative to (a module's)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: crosscheck -platform os/arch... [-C dir] packages...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if len(platforms) == 0 || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, platform := range platforms {
		if err := check(*dir, platform, flag.Args()); err != nil {
			fmt.Fprintf(os.Stderr, "crosscheck: %s: %v\n", platform, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check loads the packages and their dependencies for platform, parsed and
// type-checked from source, and returns the first errors it met.
func check(dir, platform string, patterns []string) error {
	start := time.Now()
	goos, goarch, _ := strings.Cut(platform, "/")
	cfg := &packages.Config{
		// Syntax with Deps type-checks every dependency from source; without
		// them go/packages would ask go list for export data, which compiles.
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedDeps |
			packages.NeedTypes | packages.NeedSyntax,
		Dir: dir,
		Env: append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-mod=mod"),
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return fmt.Errorf("load %s: %w", strings.Join(patterns, " "), err)
	}
	var errs []string
	n := 0
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		n++
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		const most = 20
		if len(errs) > most {
			errs = append(errs[:most], fmt.Sprintf("and %d more", len(errs)-most))
		}
		return fmt.Errorf("%d errors:\n\t%s", len(errs), strings.Join(errs, "\n\t"))
	}
	fmt.Fprintf(os.Stderr, "crosscheck: %s: %s and the %d packages they import type-check (%.1fs)\n",
		platform, strings.Join(patterns, " "), n-len(pkgs), time.Since(start).Seconds())
	return nil
}
