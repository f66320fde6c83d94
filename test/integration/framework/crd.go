package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// PortableCRDFile is the manifest of the portable mode's LeaseCandidate CRD,
// relative to the repository root.
const PortableCRDFile = "manifests/crd/leasecandidates.cle.dev.yaml"

// RepoPath returns the absolute path of rel, a path relative to the
// repository root, wherever the test binary runs from.
func RepoPath(rel string) string {
	root, err := repoRoot()
	if err != nil {
		panic(err)
	}
	return filepath.Join(root, rel)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CustomResourceDefinition in the YAML file path (a
// path relative to the repository root) unless it exists, and returns once it
// is Established and its resources are in discovery, so that clients that
// discover the API see it. It goes through the dynamic client so that the
// project does not depend on the apiextensions module.
func (s *Server) InstallCRD(ctx context.Context, path string) error {
	data, err := os.ReadFile(RepoPath(path))
	if err != nil {
		return fmt.Errorf("read CRD manifest: %w", err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return fmt.Errorf("parse CRD manifest %s: %w", path, err)
	}
	cfg := s.Config()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdGVR)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD %s: %w", crd.GetName(), err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !established(got) {
			return false, nil
		}
		for _, v := range versions {
			name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
			resources, err := disc.ServerResourcesForGroupVersion(group + "/" + name)
			if err != nil {
				return false, nil
			}
			found := false
			for _, r := range resources.APIResources {
				found = found || r.Name == plural
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established and discoverable: %w", crd.GetName(), err)
	}
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
