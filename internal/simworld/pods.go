package simworld

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// PodsGR is the resource of Pods.
var PodsGR = schema.GroupResource{Resource: "pods"}

// Pod is the stored Pod of key, nil if there is none; the server's own, as
// Lease's.
func (s *Server) Pod(key string) *corev1.Pod { return s.pods[key] }

// PodKeys are the keys of the stored Pods, in order.
func (s *Server) PodKeys() []string {
	keys := make([]string, 0, len(s.pods))
	for k := range s.pods {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CreatePod stores a new Pod ns/name (a controller of Pods creating it, or
// creating it again with a new UID after it was deleted) and sends the event
// to the watchers then listed. It fails with AlreadyExists if there is one.
func (s *Server) CreatePod(ns, name string, pod *corev1.Pod, by string, watchers func() []*Watcher) (*corev1.Pod, error) {
	key := Key(ns, name)
	if s.pods[key] != nil {
		return nil, apierrors.NewAlreadyExists(PodsGR, name)
	}
	stored := pod.DeepCopy()
	stored.Namespace, stored.Name = ns, name
	stored.ResourceVersion = s.NextRV()
	stored.UID = types.UID(name + "-" + stored.ResourceVersion)
	return s.storePod(key, stored, by, watchers), nil
}

// WritePodStatus replaces the status of the Pod ns/name whose UID is uid, as
// its kubelet does (a status update whatever the resourceVersion, as the
// kubelet's patch is); NotFound when the Pod is gone or is another one of
// the same name.
func (s *Server) WritePodStatus(ns, name string, uid types.UID, status corev1.PodStatus, by string, watchers func() []*Watcher) (*corev1.Pod, error) {
	key := Key(ns, name)
	cur := s.pods[key]
	if cur == nil || cur.UID != uid {
		return nil, apierrors.NewNotFound(PodsGR, name)
	}
	stored := cur.DeepCopy()
	stored.Status = *status.DeepCopy()
	stored.ResourceVersion = s.NextRV()
	return s.storePod(key, stored, by, watchers), nil
}

// DeletePod removes the Pod ns/name at once, as a deletion with --force
// does, whatever its containers still run.
func (s *Server) DeletePod(ns, name, by string, watchers func() []*Watcher) {
	key := Key(ns, name)
	cur := s.pods[key]
	if cur == nil {
		return
	}
	s.Wrote()
	delete(s.pods, key)
	s.w.Tracef("pod %s deleted by %s", Shown(s.Home, ns, name), by)
	for _, sw := range watchers() {
		sw.Send(cur, true)
	}
}

func (s *Server) storePod(key string, stored *corev1.Pod, by string, watchers func() []*Watcher) *corev1.Pod {
	s.Wrote()
	s.pods[key] = stored
	s.w.Tracef("pod %s by %s: rv=%s", Shown(s.Home, stored.Namespace, stored.Name), by, stored.ResourceVersion)
	sendAll(watchers, stored.DeepCopy())
	return stored.DeepCopy()
}
