package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

// In a cluster the example runs from manifests/examples: its namespace, Lease
// and Deployment.
const (
	clusterNamespace  = "cle-example"
	clusterLease      = "example"
	clusterDeployment = "example-candidate"
	controllerNS      = "cle-system"
	controllerName    = "cle-controller"
	fieldManager      = "cle-run"
)

// cluster deploys from manifests/ to a real cluster and takes back what it
// created.
type cluster struct {
	o       options
	kubectl string
	client  kubernetes.Interface
	dynamic dynamic.Interface
	mapper  meta.ResettableRESTMapper
	logf    func(string, ...any)
	// created are the objects this run created, in the order applied: on
	// exit they are deleted, newest first. Objects that existed before are
	// updated but left in place.
	created []*unstructured.Unstructured
}

// runCluster is the demonstration on the cluster that the kubeconfig loading
// rules ($KUBECONFIG) point at: cle-controller from manifests/portable (unless
// one is installed already), three example candidates from
// manifests/examples at the old version, an election shown by `kubectl cle
// watch`, then a rolling upgrade of the Deployment to the new version, one
// Pod at a time. On exit it deletes what it created.
func runCluster(ctx context.Context, o options, logf func(string, ...any)) (err error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	raw, err := loader.RawConfig()
	if err != nil {
		return fmt.Errorf("load the kubeconfig: %w", err)
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("load the kubeconfig: %w", err)
	}
	kubectl, err := findKubectl()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", o.logDir, err)
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		return err
	}
	c := &cluster{
		o: o, kubectl: kubectl, client: clients.Kube, dynamic: clients.Dynamic, logf: logf,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(clients.Kube.Discovery())),
	}
	fmt.Printf("\nDeploying to the cluster of context %q (%s), image %s.\n", raw.CurrentContext, cfg.Host, o.image)
	fmt.Printf("Everything this creates is deleted on exit; objects that existed before are left in place.\n\n")
	// Deletion runs even after Ctrl-C, after the watch has stopped.
	defer c.cleanUp(context.WithoutCancel(ctx))
	var children []*child
	defer func() {
		for _, ch := range children {
			ch.stop(logf)
		}
	}()

	installed, err := c.controllerInstalled(ctx)
	if err != nil {
		return err
	}
	if installed {
		say("cle-controller is installed already (Deployment %s/%s): using it; it must run in portable mode, as the example candidates do.", controllerNS, controllerName)
	} else {
		say("Installing cle-controller in portable mode (manifests/portable: the LeaseCandidate CRD and the controller).")
		if err := c.apply(ctx, "portable", nil); err != nil {
			return err
		}
	}

	// The example candidates run in portable mode (manifests/examples): so
	// must the controller that elects them, and kubectl cle.
	d := &demo{o: o, ctx: ctx, client: c.client, children: &children, liveFrom: c.liveCandidates, pluginArgs: []string{"--api-mode=portable"}}
	d.o.namespace, d.o.lease = clusterNamespace, clusterLease
	if err := d.startWatch(kubectl); err != nil {
		return err
	}
	say("Deploying 3 replicas of the example component at version %s (manifests/examples); they register LeaseCandidates and the controller elects one.", oldVersion)
	if err := c.apply(ctx, "examples", versionArgs(oldVersion)); err != nil {
		return err
	}
	if !installed {
		if err := c.waitAvailable(ctx, controllerNS, controllerName, 1); err != nil {
			return err
		}
	}
	if err := c.waitAvailable(ctx, clusterNamespace, clusterDeployment, 3); err != nil {
		return err
	}
	if _, err := d.waitForRightLeader(); err != nil {
		return err
	}
	d.status()
	if o.upgrade {
		if err := d.pause(); err != nil {
			return err
		}
		say("Rolling upgrade of the Deployment to %s: one Pod at a time (maxUnavailable 1, maxSurge 0); leadership must stay on a %s replica while one is left.", newVersion, oldVersion)
		if err := c.apply(ctx, "examples", versionArgs(newVersion)); err != nil {
			return err
		}
		// Until the rollout is done, every look at the Lease must find a
		// leader no newer than the oldest live candidate.
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, o.rolloutTimeout, true, func(ctx context.Context) (bool, error) {
			if _, _, err := d.checkLeader(ctx); err != nil {
				return false, err
			}
			return c.available(ctx, clusterNamespace, clusterDeployment, 3)
		})
		if err != nil {
			return fmt.Errorf("rolling upgrade: %w%s", err, c.podReport(ctx, clusterNamespace, clusterDeployment))
		}
		leader, err := d.waitForRightLeader()
		if err != nil {
			return err
		}
		d.status()
		lives, _ := c.liveCandidates(ctx)
		say("Upgrade done: %s leads at %s, and no leader was ever seen newer than a live replica.", leader, lives[leader])
	}
	if o.exitAfter {
		fmt.Println("\nDemonstration done; deleting what it created.")
		return nil
	}
	fmt.Printf("\nWatch it with: kubectl cle watch -n %s %s   (Ctrl-C here deletes what this created)\n", clusterNamespace, clusterLease)
	<-ctx.Done()
	fmt.Println()
	return nil
}

// findKubectl is kubectl from hack/kube-bin.sh's cache, else from PATH.
func findKubectl() (string, error) {
	if path, err := framework.Binary("kubectl"); err == nil {
		return path, nil
	}
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return "", errors.New("kubectl not found: put it on PATH or run hack/kube-bin.sh kubectl")
	}
	return path, nil
}

// controllerInstalled reports whether cle-controller runs in the cluster.
func (c *cluster) controllerInstalled(ctx context.Context) (bool, error) {
	_, err := c.client.AppsV1().Deployments(controllerNS).Get(ctx, controllerName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for an installed cle-controller: %w", err)
	}
	return true, nil
}

// versionArgs sets the example candidate's binary and emulation versions.
func versionArgs(v string) func(args []string) []string {
	return func(args []string) []string {
		out := slices.Clone(args)
		for i, a := range out {
			switch {
			case strings.HasPrefix(a, "--binary-version="):
				out[i] = "--binary-version=" + v
			case strings.HasPrefix(a, "--emulation-version="):
				out[i] = "--emulation-version=" + v
			}
		}
		return out
	}
}

// apply renders manifests/dir with kubectl kustomize, sets the image of every
// Deployment's containers (and their args with editArgs), and server-side
// applies each object, remembering those it created.
func (c *cluster) apply(ctx context.Context, dir string, editArgs func([]string) []string) error {
	cmd := exec.CommandContext(ctx, c.kubectl, "kustomize", filepath.Join(c.o.manifests, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize manifests/%s: %w\n%s", dir, err, stderr.String())
	}
	objs, err := decodeAll(out)
	if err != nil {
		return fmt.Errorf("manifests/%s: %w", dir, err)
	}
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" {
			if err := setContainers(obj, c.o.image, editArgs); err != nil {
				return fmt.Errorf("manifests/%s: Deployment %s: %w", dir, obj.GetName(), err)
			}
		}
		if err := c.applyOne(ctx, obj); err != nil {
			return fmt.Errorf("manifests/%s: %w", dir, err)
		}
	}
	return nil
}

func decodeAll(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

func setContainers(obj *unstructured.Unstructured, image string, editArgs func([]string) []string) error {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		return err
	}
	for i := range d.Spec.Template.Spec.Containers {
		ctr := &d.Spec.Template.Spec.Containers[i]
		ctr.Image = image
		if editArgs != nil {
			ctr.Args = editArgs(ctr.Args)
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&d)
	if err != nil {
		return err
	}
	// The converter adds empty status and creationTimestamp, which an apply
	// must not claim.
	unstructured.RemoveNestedField(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	obj.Object = u
	return nil
}

// resource is the client of obj's resource (in its namespace if namespaced).
func (c *cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.dynamic.Resource(mapping.Resource), nil
}

func (c *cluster) applyOne(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	ri, err := c.resource(obj)
	if err != nil {
		return err
	}
	ref := klog.KObj(obj).String()
	_, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	existed := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get %s %s: %w", gvk.Kind, ref, err)
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s %s: %w", gvk.Kind, ref, err)
	}
	verb := "configured"
	if !existed {
		verb = "created"
		if !slices.ContainsFunc(c.created, func(o *unstructured.Unstructured) bool { return sameObject(o, obj) }) {
			c.created = append(c.created, obj)
		}
	}
	fmt.Printf("  %s %s %s\n", strings.ToLower(gvk.Kind), ref, verb)
	if gvk.Kind == "CustomResourceDefinition" {
		// Its resource is served once it is established; the mapper must
		// then learn of it.
		if err := c.waitEstablished(ctx, obj.GetName()); err != nil {
			return err
		}
		c.mapper.Reset()
	}
	return nil
}

func sameObject(a, b *unstructured.Unstructured) bool {
	return a.GroupVersionKind() == b.GroupVersionKind() && a.GetNamespace() == b.GetNamespace() && a.GetName() == b.GetName()
}

func (c *cluster) waitEstablished(ctx context.Context, name string) error {
	crds := c.dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// cleanUp deletes the objects this run created, newest first. A Namespace's
// deletion completes in the background.
func (c *cluster) cleanUp(ctx context.Context) {
	if len(c.created) == 0 {
		return
	}
	say("Deleting the %d objects this run created.", len(c.created))
	background := metav1.DeletePropagationBackground
	for _, obj := range slices.Backward(c.created) {
		gvk := obj.GroupVersionKind()
		ri, err := c.resource(obj)
		if err != nil {
			c.logf("delete %s: %v", klog.KObj(obj), err)
			continue
		}
		err = ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &background})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			c.logf("delete %s %s: %v", gvk.Kind, klog.KObj(obj), err)
		default:
			fmt.Printf("  %s %s deleted\n", strings.ToLower(gvk.Kind), klog.KObj(obj))
		}
	}
	c.created = nil
}

// available reports whether the Deployment's current template runs want
// available replicas.
func (c *cluster) available(ctx context.Context, ns, name string, want int32) (bool, error) {
	d, err := c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, nil // transient; the timeout tells
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas >= want && s.AvailableReplicas >= want &&
		s.Replicas == s.UpdatedReplicas, nil
}

// waitAvailable waits until the Deployment has want available replicas of
// its current template; on timeout it says what its Pods are waiting for.
func (c *cluster) waitAvailable(ctx context.Context, ns, name string, want int32) error {
	say("Waiting for Deployment %s/%s to have %d available replicas.", ns, name, want)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, c.o.rolloutTimeout, true, func(ctx context.Context) (bool, error) {
		return c.available(ctx, ns, name, want)
	})
	if err != nil {
		return fmt.Errorf("Deployment %s/%s has not %d available replicas after %s: %w%s", ns, name, want, c.o.rolloutTimeout, err, c.podReport(ctx, ns, name))
	}
	return nil
}

// podReport says what the Deployment's Pods are waiting for, and how to get
// the image into the cluster.
func (c *cluster) podReport(ctx context.Context, ns, name string) string {
	var b strings.Builder
	ctx = context.WithoutCancel(ctx)
	d, err := c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err == nil {
			pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err == nil {
				fmt.Fprintf(&b, "\nPods of %s/%s: %d", ns, name, len(pods.Items))
				for _, p := range pods.Items {
					fmt.Fprintf(&b, "\n  %s: %s%s", p.Name, p.Status.Phase, waiting(p))
				}
			}
		}
	}
	fmt.Fprintf(&b, "\nThe cluster must be able to pull %s: make image, then load _output/image/cle.tar into the cluster "+
		"(kind load image-archive _output/image/cle.tar, or crane push _output/image/oci to a registry and IMAGE=<that reference>).", c.o.image)
	return b.String()
}

func waiting(p corev1.Pod) string {
	var reasons []string
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			reasons = append(reasons, s.State.Waiting.Reason+": "+s.State.Waiting.Message)
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			reasons = append(reasons, "unschedulable: "+cond.Message)
		}
	}
	if len(reasons) == 0 {
		return ""
	}
	return " (" + strings.Join(reasons, "; ") + ")"
}

// liveCandidates are the example's LeaseCandidates (the CRD's, in portable
// mode), by name, with their emulation versions.
func (c *cluster) liveCandidates(ctx context.Context) (map[string]string, error) {
	list, err := c.dynamic.Resource(access.CandidateResource).Namespace(clusterNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	live := map[string]string{}
	for i := range list.Items {
		lc, err := access.CandidateFromUnstructured(&list.Items[i])
		if err != nil || lc.Spec.LeaseName != clusterLease || lc.DeletionTimestamp != nil {
			continue
		}
		live[lc.Name] = lc.Spec.EmulationVersion
	}
	return live, nil
}
