package controller

import (
	"fmt"
	"sync"
	"unicode/utf8"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// eventDeduper emits an Event only when it says something new: once per
// change, not once per reconcile of an unchanged situation.
type eventDeduper struct {
	recorder events.EventRecorder
	mu       sync.Mutex
	last     map[types.NamespacedName]map[string]string // lease -> topic -> last note
}

func newEventDeduper(r events.EventRecorder) *eventDeduper {
	return &eventDeduper{recorder: r, last: map[types.NamespacedName]map[string]string{}}
}

// emit records an Event on the Lease unless the last Event of the same reason
// on it said the same. It reports whether the Event was news, so that
// counters of the same situation count changes, not reconciles.
func (d *eventDeduper) emit(key types.NamespacedName, lease *coordinationv1.Lease, eventType, reason, action, note string, args ...any) bool {
	return d.emitFor(key, reason, lease, nil, eventType, reason, action, note, args...)
}

// emitFor is emit with an explicit deduplication topic, for Events of one
// reason about different subjects (e.g. one per invalid candidate), and the
// subject as the Event's related object.
//
// The related object matters beyond telling who the Event is about: the
// Event recorder folds an Event into an earlier one with the same Lease (at
// the same resourceVersion), reason, action and related object, counting it
// but keeping the earlier note. Without the candidate as related object, the
// second candidate found invalid on a Lease in a row would only be counted.
func (d *eventDeduper) emitFor(key types.NamespacedName, topic string, lease *coordinationv1.Lease, related *corev1.ObjectReference, eventType, reason, action, note string, args ...any) bool {
	msg := fmt.Sprintf(note, args...)
	d.mu.Lock()
	topics := d.last[key]
	if topics == nil {
		topics = map[string]string{}
		d.last[key] = topics
	}
	if topics[topic] == msg {
		d.mu.Unlock()
		return false
	}
	topics[topic] = msg
	d.mu.Unlock()
	if lease == nil {
		// The Lease does not exist (yet): the Event still names it.
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	d.recorder.Eventf(lease, relatedObject(related), eventType, reason, action, "%s", boundNote(msg))
	return true
}

// emitChange records an Event about a write the controller just made, with
// the candidate it concerns as related object. Every such write is a change,
// so it is never deduplicated away here, even when it reads like an earlier
// one (the same winner elected again after the Lease was deleted, the same
// preferred holder set again after it was cleared).
func (d *eventDeduper) emitChange(lease *coordinationv1.Lease, related *corev1.ObjectReference, eventType, reason, action, note string, args ...any) {
	d.recorder.Eventf(lease, relatedObject(related), eventType, reason, action, "%s", boundNote(fmt.Sprintf(note, args...)))
}

// relatedObject is ref as the recorder takes it: no object at all, not a nil
// reference, when there is none.
func relatedObject(ref *corev1.ObjectReference) runtime.Object {
	if ref == nil {
		return nil
	}
	return ref
}

// maxNote is the longest note, in bytes, that kube-apiserver accepts in an
// Event; it rejects a longer one, and the recorder drops it for good.
const maxNote = 1024

// noteCut ends a note that was cut to fit.
const noteCut = " [...]"

// boundNote cuts a note that does not fit in an Event, on a character
// boundary: what candidates write (names, versions) has no length limit of
// its own, and an Event cut short is better than none.
func boundNote(note string) string {
	if len(note) <= maxNote {
		return note
	}
	cut := maxNote - len(noteCut)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + noteCut
}

// resolve forgets the last Event of topic on a Lease: the situation it
// reported is over, so its next occurrence is news again.
func (d *eventDeduper) resolve(key types.NamespacedName, topic string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last[key], topic)
}

// forgetCandidate drops what was said about one candidate of a Lease, once
// it has left the Lease.
func (d *eventDeduper) forgetCandidate(key types.NamespacedName, name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last[key], "candidate/"+name)
	delete(d.last[key], "ping/"+name)
}

// forget drops what was said about a Lease that no longer has candidates.
func (d *eventDeduper) forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, key)
}
