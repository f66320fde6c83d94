package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// spdxDocument is the part of SPDX 2.3 (JSON) an SBOM of Go binaries
// needs: one package per binary, per Go module linked into them, and Go's
// standard library, with package URLs.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string        `json:"SPDXID"`
	Name             string        `json:"name"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	ExternalRefs     []spdxExtRef  `json:"externalRefs,omitempty"`
	Checksums        []spdxSummary `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded,omitempty"`
	LicenseDeclared  string        `json:"licenseDeclared,omitempty"`
	Comment          string        `json:"comment,omitempty"`
}

type spdxSummary struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// ownLicense is the SPDX identifier of cle's own license (LICENSE).
const ownLicense = "Apache-2.0"

// sbom describes the image's binaries (read from their Go build
// information) and the modules linked into them, each with the license its
// source declares (see declaredLicense).
func sbom(binDir, version, revision, source string, created time.Time) ([]byte, error) {
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "cle-" + version,
		DocumentNamespace: strings.TrimSuffix(source, "/") + "/spdx/" + version + "-" + revision,
		CreationInfo:      spdxCreation{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: cle hack/tools/image"}},
	}
	ids := map[string]string{} // module path@version -> SPDXID
	var modules []spdxPackage
	id := func(kind, name string) string {
		r := strings.NewReplacer("/", "-", "@", "-", "+", "-", "_", "-", "~", "-")
		return "SPDXRef-" + kind + "-" + r.Replace(name)
	}
	for _, b := range binaries {
		bi, err := buildinfo.ReadFile(filepath.Join(binDir, b))
		if err != nil {
			return nil, fmt.Errorf("read the Go build information of %s: %w", b, err)
		}
		binID := id("Binary", b)
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: binID, Name: b, VersionInfo: version, DownloadLocation: source, FilesAnalyzed: false,
			LicenseConcluded: ownLicense, LicenseDeclared: ownLicense,
			ExternalRefs: []spdxExtRef{purl(bi.Path, version)},
			Comment:      "/" + b + " in the image, built from " + bi.Path + " with " + bi.GoVersion,
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", binID})
		deps := []struct{ path, version, sum string }{{"stdlib", strings.TrimPrefix(bi.GoVersion, "go"), ""}}
		for _, m := range bi.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			deps = append(deps, struct{ path, version, sum string }{m.Path, m.Version, m.Sum})
		}
		for _, m := range deps {
			key := m.path + "@" + m.version
			pkgID, ok := ids[key]
			if !ok {
				pkgID = id("Module", key)
				ids[key] = pkgID
				p := spdxPackage{SPDXID: pkgID, Name: m.path, VersionInfo: m.version, DownloadLocation: "NOASSERTION",
					ExternalRefs: []spdxExtRef{purl(m.path, m.version)}, LicenseConcluded: "NOASSERTION",
					LicenseDeclared: declaredLicense(m.path, m.version)}
				if m.sum != "" {
					p.Comment = "go.sum " + m.sum
				}
				modules = append(modules, p)
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "CONTAINS", pkgID})
		}
	}
	slices.SortFunc(modules, func(a, b spdxPackage) int { return strings.Compare(a.SPDXID, b.SPDXID) })
	doc.Packages = append(doc.Packages, modules...)
	return json.MarshalIndent(doc, "", "  ")
}

func purl(path, version string) spdxExtRef {
	return spdxExtRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: "pkg:golang/" + path + "@" + version}
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
