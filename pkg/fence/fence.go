// Package fence makes kube-apiserver refuse a deposed leader's writes. For one
// election it builds a ValidatingAdmissionPolicy, and its binding, whose
// parameter is the election's Lease: the writes the user declares as the
// leader's, made by the ServiceAccount the replicas run as, are admitted only
// from the Pod whose process holds the Lease now, as the holder's last renewal
// stamped it (access.HolderInstanceAnnotation, which candidates of
// pkg/candidate with a proof of death write). A process that was paused,
// killed with writes queued, or preempted while its writes were in flight is
// refused at the API server from the moment the Lease names another holder,
// whatever its own process does.
//
// What the policy decides, and why:
//   - a Lease with no holder, or whose holder's last renewal carries no stamp
//     (a holder outside any Pod, or one without a proof of death): every
//     declared write is refused, since nobody is known to lead;
//   - a request of the ServiceAccount not made with a token bound to a Pod (a
//     long-lived token Secret): refused, since it cannot be tied to the holder;
//   - a request of any other user: not matched, the policy is for the
//     replicas' writes only;
//   - the election's own writes (Leases, LeaseCandidates of either API mode,
//     Events) and the review APIs (TokenReview, SubjectAccessReview, ...) are
//     never matched, whatever the rules say, so fencing cannot stop an
//     election from moving on;
//   - a missing Lease (before its first election, or between its deletion
//     and the controller creating it again): the policy does not apply
//     (the binding's parameterNotFoundAction is Allow). kube-apiserver
//     resolves the parameter before it evaluates match conditions, so a Deny
//     there would refuse every user's writes of the fenced resources, not
//     only the replicas': the kube-root-ca.crt ConfigMap of a new namespace
//     among them, and with it every Pod there. The write guard and the
//     fencing token still stand in that window.
//
// For objects a leader writes from outside any Pod, or without a proof of
// death, an Election that is ByToken fences by the fencing token instead:
// leader work stamps each object it writes with its term's token (Stamp),
// and the policy refuses an update whose token is below the object's.
//
// In an emergency, WarnOnly turns refusals into warnings and audit
// annotations, and deleting the binding turns fencing off; both need the
// right to write ValidatingAdmissionPolicyBindings, which leaders should not
// have.
package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// Election is one election whose leader's writes are fenced.
type Election struct {
	// Namespace and Lease name the election's Lease.
	Namespace, Lease string
	// ServiceAccount is the ServiceAccount the replicas run as, in
	// ServiceAccountNamespace (default Namespace).
	ServiceAccount, ServiceAccountNamespace string
	// Rules are the writes only the leader makes.
	Rules []Rule
	// Namespaces limits the rules to the objects of these namespaces (and
	// leaves cluster-scoped objects out); empty: every namespace, and
	// cluster-scoped objects too.
	Namespaces []string
	// WarnOnly admits the writes the policy would refuse, with a warning and
	// an audit annotation each: an emergency override.
	WarnOnly bool
	// ByToken judges the writes by the fencing token they carry instead of
	// by the Pod they come from (see TokenAnnotation): an update whose
	// token is below the one stored on the object is refused, whoever
	// makes it and from wherever. It needs no proof of death and no Pod,
	// only leader work that stamps its writes (Stamp); creates and deletes
	// carry no stored token to compare and are not judged. ServiceAccount
	// is then optional: without it, every user's updates are judged.
	ByToken bool
}

// TokenAnnotation carries, on an object that leader work writes, the fencing
// token of the term that wrote it (candidate.TokenFrom). With the policy of
// an Election that is ByToken, kube-apiserver refuses an update that carries
// a lower token than the object has: the write of a deposed leader, after
// its successor wrote.
const TokenAnnotation = "cle.dev/fencing-token"

// LeaseAnnotation names, on the ValidatingAdmissionPolicy and binding of an
// Election, the Lease they fence, as namespace/name.
const LeaseAnnotation = "cle.dev/fenced-lease"

// Stamp records token on obj, for a write judged by the policy of an
// Election that is ByToken. Leader work stamps every object it writes, with
// its own term's token:
//
//	token, _ := candidate.TokenFrom(ctx)
//	fence.Stamp(deployment, token)
//	_, err := client.AppsV1().Deployments(ns).Update(ctx, deployment, metav1.UpdateOptions{})
//
// A patch must carry the annotation too: a patch that leaves it out keeps
// the stored token, which the policy admits.
func Stamp(obj metav1.Object, token int32) {
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[TokenAnnotation] = strconv.FormatInt(int64(token), 10)
	obj.SetAnnotations(annotations)
}

// Rule is some writes of the leader.
type Rule struct {
	// Group is the API group ("" for the core group); Resource the resource,
	// with "/subresource" for a subresource ("*" for every resource of the
	// group, and "resource/*" for every subresource).
	Group, Resource string
	// Verbs are the verbs fenced: create, update, patch, delete and
	// deletecollection (patch is an update and deletecollection a delete
	// to admission, so each brings its pair in).
	Verbs []string
}

// podNameExtra is the extra of a user authenticated by a ServiceAccount
// token bound to a Pod: the Pod's name.
const podNameExtra = "authentication.kubernetes.io/pod-name"

// excluded are the writes never fenced: the election's own, and the
// question-only review APIs.
var excluded = []admissionregistrationv1.NamedRuleWithOperations{
	excludedRule("coordination.k8s.io", "leases", "leasecandidates"),
	excludedRule(access.CandidateResource.Group, "*/*"),
	excludedRule("", "events"),
	excludedRule("events.k8s.io", "events"),
	excludedRule("authentication.k8s.io", "*/*"),
	excludedRule("authorization.k8s.io", "*/*"),
}

func excludedRule(group string, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes)},
	}}
}

// verbOperations are the admission operations of each verb fenced.
var verbOperations = map[string]admissionregistrationv1.OperationType{
	"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update, "patch": admissionregistrationv1.Update,
	"delete": admissionregistrationv1.Delete, "deletecollection": admissionregistrationv1.Delete,
}

// Name is the name of the policy and of its binding for the election's
// Lease: cle-fence.NAMESPACE.LEASE, or, when that is too long for a name, a
// prefix of it and a hash of the whole.
func Name(namespace, lease string) string { return name("cle-fence.", namespace, lease) }

// TokenName is Name for the policy of an Election that is ByToken,
// cle-fence-token.NAMESPACE.LEASE.
func TokenName(namespace, lease string) string { return name("cle-fence-token.", namespace, lease) }

func name(prefix, namespace, lease string) string {
	name := prefix + namespace + "." + lease
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-len(suffix)], ".-") + suffix
}

// Objects returns the policy and its binding, or what is wrong with e.
func Objects(e Election) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	if err := e.validate(); err != nil {
		return nil, nil, err
	}
	saNamespace := e.ServiceAccountNamespace
	if saNamespace == "" {
		saNamespace = e.Namespace
	}
	user := "system:serviceaccount:" + saNamespace + ":" + e.ServiceAccount
	name := Name(e.Namespace, e.Lease)
	if e.ByToken {
		name = TokenName(e.Namespace, e.Lease)
	}
	labels := map[string]string{"app.kubernetes.io/part-of": "cle", "app.kubernetes.io/component": "fence"}
	annotations := map[string]string{LeaseAnnotation: e.Namespace + "/" + e.Lease}

	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, r := range e.Rules {
		var ops []admissionregistrationv1.OperationType
		for _, v := range r.Verbs {
			if op := verbOperations[v]; !slices.Contains(ops, op) && (!e.ByToken || op == admissionregistrationv1.Update) {
				ops = append(ops, op)
			}
		}
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{r.Group}, APIVersions: []string{"*"}, Resources: []string{r.Resource}},
		}})
	}
	lease := e.Namespace + "/" + e.Lease
	check := byPod(lease, saNamespace)
	if e.ByToken {
		check = byToken(lease)
	}
	var matchConditions []admissionregistrationv1.MatchCondition
	if e.ServiceAccount != "" {
		matchConditions = []admissionregistrationv1.MatchCondition{{
			Name:       "replicas",
			Expression: fmt.Sprintf("request.userInfo.username == %q", user),
		}}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     check.paramKind,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules:        rules,
				ExcludeResourceRules: excluded,
			},
			MatchConditions: matchConditions,
			Variables:       check.variables,
			Validations:     []admissionregistrationv1.Validation{check.validation},
		},
	}
	actions := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	if e.WarnOnly {
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: actions,
		},
	}
	if check.paramKind != nil {
		binding.Spec.ParamRef = &admissionregistrationv1.ParamRef{
			Name: e.Lease, Namespace: e.Namespace,
			ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
		}
	}
	if len(e.Namespaces) > 0 {
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: slices.Sorted(slices.Values(e.Namespaces)),
			}}},
		}
	}
	return policy, binding, nil
}

// check is what the policy judges a write by: its parameter (nil: none),
// its variables and its validation.
type check struct {
	paramKind  *admissionregistrationv1.ParamKind
	variables  []admissionregistrationv1.Variable
	validation admissionregistrationv1.Validation
}

// byPod judges a write by the Pod it comes from: admitted when the
// request's token is bound to the Pod that the holder's last renewal of the
// Lease (the parameter) stamped, the Pod in saNamespace.
func byPod(lease, saNamespace string) check {
	requester := fmt.Sprintf("%q + variables.pod[0]", saNamespace+"/")
	return check{
		paramKind: &admissionregistrationv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		variables: []admissionregistrationv1.Variable{
			// The stamp of the holder's last renewal: instance, renewTime,
			// Pod, container, holder. It counts only while the Lease's
			// holder and renewTime are the ones it was written with.
			{Name: "stamp", Expression: fmt.Sprintf("params.metadata.?annotations[?%q].orValue('').split(' ')", access.HolderInstanceAnnotation)},
			{Name: "stamped", Expression: "size(variables.stamp) == 5 && params.spec.?holderIdentity.orValue('') != '' && " +
				"variables.stamp[4] == params.spec.?holderIdentity.orValue('') && variables.stamp[1] == params.spec.?renewTime.orValue('')"},
			// The Pod the request's token is bound to.
			{Name: "pod", Expression: fmt.Sprintf("request.userInfo.?extra[?%q].orValue([])", podNameExtra)},
		},
		validation: admissionregistrationv1.Validation{
			Expression: "size(variables.pod) == 1 && variables.stamped && variables.stamp[2] == " + requester,
			MessageExpression: fmt.Sprintf("size(variables.pod) != 1 ? %q : !variables.stamped ? %q : %q + %s + %q + variables.stamp[2]",
				"only the leader of Lease "+lease+" may make this write, and this request's token is bound to no Pod",
				"only the leader of Lease "+lease+" may make this write, and the Lease names no holder whose last renewal says its Pod",
				"only the leader of Lease "+lease+" may make this write: Pod ", requester, " is not the holder's Pod "),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
	}
}

// byToken judges an update by the token it carries against the object's:
// refused when it is below, or missing or not a number while the object has
// one. It takes no parameter.
func byToken(lease string) check {
	const number = "'^[0-9]{1,10}$'"
	return check{
		variables: []admissionregistrationv1.Variable{
			{Name: "stored", Expression: fmt.Sprintf("oldObject.metadata.?annotations[?%q].orValue('')", TokenAnnotation)},
			{Name: "token", Expression: fmt.Sprintf("object.metadata.?annotations[?%q].orValue('')", TokenAnnotation)},
		},
		validation: admissionregistrationv1.Validation{
			Expression: "!variables.stored.matches(" + number + ") || " +
				"(variables.token.matches(" + number + ") && int(variables.token) >= int(variables.stored))",
			MessageExpression: fmt.Sprintf("%q + (variables.token == '' ? 'none' : variables.token) + %q + variables.stored",
				"a deposed leader's write of Lease "+lease+": it carries fencing token ", " and the object already has "),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
	}
}

// validate says everything wrong with e at once.
func (e Election) validate() error {
	var errs []error
	named := func(what, v string, valid func(string) []string) {
		if msgs := valid(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", what, v, strings.Join(msgs, "; ")))
		}
	}
	named("the Lease's namespace", e.Namespace, validation.IsDNS1123Label)
	named("the Lease", e.Lease, validation.IsDNS1123Subdomain)
	if e.ServiceAccount != "" || !e.ByToken {
		named("the ServiceAccount", e.ServiceAccount, validation.IsDNS1123Label)
	}
	if e.ServiceAccountNamespace != "" {
		named("the ServiceAccount's namespace", e.ServiceAccountNamespace, validation.IsDNS1123Label)
	}
	for _, ns := range e.Namespaces {
		named("namespace", ns, validation.IsDNS1123Label)
	}
	if len(e.Rules) == 0 {
		errs = append(errs, errors.New("no writes to fence: name at least one resource"))
	}
	for _, r := range e.Rules {
		if r.Resource == "" {
			errs = append(errs, fmt.Errorf("a rule of group %q names no resource", r.Group))
		}
		if len(r.Verbs) == 0 {
			errs = append(errs, fmt.Errorf("%s: no verbs", r))
		}
		updates := false
		for _, v := range r.Verbs {
			op, ok := verbOperations[v]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: verb %q is not a write (create, update, patch, delete, deletecollection)", r, v))
			}
			updates = updates || op == admissionregistrationv1.Update
		}
		if e.ByToken && len(r.Verbs) > 0 && !updates {
			errs = append(errs, fmt.Errorf("%s: a token fence judges updates and patches only, and the verbs name neither", r))
		}
		if r.election() {
			errs = append(errs, fmt.Errorf("%s: the election's own objects are never fenced (Leases, LeaseCandidates and Events are left out of every policy)", r))
		}
	}
	return errors.Join(errs...)
}

// election reports a rule that names only what the policy never matches.
func (r Rule) election() bool {
	for _, x := range excluded {
		if x.APIGroups[0] != r.Group {
			continue
		}
		if slices.Contains(x.Resources, "*/*") {
			return true
		}
		resource, _, _ := strings.Cut(r.Resource, "/")
		if slices.Contains(x.Resources, resource) {
			return true
		}
	}
	return false
}

// String is the rule as kubectl names resources: resource.group.
func (r Rule) String() string {
	resource, sub, _ := strings.Cut(r.Resource, "/")
	if r.Group != "" {
		resource += "." + r.Group
	}
	if sub != "" {
		resource += "/" + sub
	}
	return resource
}

// ParseResource reads a resource as kubectl names it (RESOURCE[.GROUP][/SUBRESOURCE],
// "configmaps", "deployments.apps", "deployments.apps/scale") into a Rule
// without verbs.
func ParseResource(s string) (Rule, error) {
	name, sub, hasSub := strings.Cut(s, "/")
	resource, group, _ := strings.Cut(name, ".")
	if resource == "" || (hasSub && sub == "") || strings.Contains(sub, "/") {
		return Rule{}, fmt.Errorf("resource %q: want RESOURCE[.GROUP][/SUBRESOURCE], such as configmaps or deployments.apps", s)
	}
	if hasSub {
		resource += "/" + sub
	}
	return Rule{Group: group, Resource: resource}, nil
}
