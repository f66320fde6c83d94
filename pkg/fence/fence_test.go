package fence

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func election() Election {
	return Election{
		Namespace: "team-a", Lease: "my-controller", ServiceAccount: "my-controller",
		Rules: []Rule{{Group: "apps", Resource: "deployments", Verbs: []string{"create", "patch", "update", "delete"}}},
	}
}

func TestObjects(t *testing.T) {
	policy, binding, err := Objects(election())
	if err != nil {
		t.Fatal(err)
	}
	if policy.Name != "cle-fence.team-a.my-controller" || binding.Name != policy.Name || binding.Spec.PolicyName != policy.Name {
		t.Errorf("names: policy %q, binding %q for %q", policy.Name, binding.Name, binding.Spec.PolicyName)
	}
	if pk := policy.Spec.ParamKind; pk == nil || pk.APIVersion != "coordination.k8s.io/v1" || pk.Kind != "Lease" {
		t.Errorf("paramKind %v, want the Lease", pk)
	}
	if ref := binding.Spec.ParamRef; ref == nil || ref.Name != "my-controller" || ref.Namespace != "team-a" ||
		ref.ParameterNotFoundAction == nil || *ref.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
		t.Errorf("paramRef %+v, want team-a/my-controller, not applying when it is missing (a Deny would refuse every user's writes)", ref)
	}
	if got := policy.Spec.MatchConditions[0].Expression; got != `request.userInfo.username == "system:serviceaccount:team-a:my-controller"` {
		t.Errorf("match condition %s", got)
	}
	rule := policy.Spec.MatchConstraints.ResourceRules[0]
	if !slices.Equal(rule.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}) ||
		!slices.Equal(rule.APIGroups, []string{"apps"}) || !slices.Equal(rule.Resources, []string{"deployments"}) {
		t.Errorf("rule %+v: want CREATE, UPDATE (update and patch once), DELETE of apps deployments", rule)
	}
	if *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %s, want Fail: a policy that cannot be evaluated refuses", *policy.Spec.FailurePolicy)
	}
	if !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("actions %v, want Deny", binding.Spec.ValidationActions)
	}
	if binding.Spec.MatchResources != nil {
		t.Errorf("matchResources %+v without Namespaces, want none: every namespace", binding.Spec.MatchResources)
	}
	// The election's own writes are never matched.
	var excludedGroups []string
	for _, r := range policy.Spec.MatchConstraints.ExcludeResourceRules {
		excludedGroups = append(excludedGroups, r.APIGroups...)
	}
	for _, g := range []string{"coordination.k8s.io", "cle.dev", "", "events.k8s.io", "authorization.k8s.io", "authentication.k8s.io"} {
		if !slices.Contains(excludedGroups, g) {
			t.Errorf("group %q is not excluded", g)
		}
	}
}

func TestObjectsOptions(t *testing.T) {
	e := election()
	e.WarnOnly, e.Namespaces, e.ServiceAccountNamespace = true, []string{"b", "a"}, "ops"
	policy, binding, err := Objects(e)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}) {
		t.Errorf("WarnOnly actions %v, want Warn and Audit", binding.Spec.ValidationActions)
	}
	sel := binding.Spec.MatchResources.NamespaceSelector.MatchExpressions[0]
	if sel.Key != "kubernetes.io/metadata.name" || !slices.Equal(sel.Values, []string{"a", "b"}) {
		t.Errorf("namespace selector %+v, want the namespaces a and b", sel)
	}
	if !strings.Contains(policy.Spec.MatchConditions[0].Expression, "system:serviceaccount:ops:my-controller") {
		t.Errorf("match condition %s, want the ServiceAccount of namespace ops", policy.Spec.MatchConditions[0].Expression)
	}
	// The Pod the holder's stamp names is in the ServiceAccount's namespace.
	if v := policy.Spec.Validations[0].Expression; !strings.Contains(v, `"ops/" + variables.pod[0]`) {
		t.Errorf("validation %s, want the requester's Pod in namespace ops", v)
	}
}

func TestObjectsRefusesBadElections(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*Election)
		want   string
	}{
		"no rules":    {func(e *Election) { e.Rules = nil }, "no writes to fence"},
		"a read":      {func(e *Election) { e.Rules[0].Verbs = []string{"get"} }, `verb "get" is not a write`},
		"no verbs":    {func(e *Election) { e.Rules[0].Verbs = nil }, "no verbs"},
		"no resource": {func(e *Election) { e.Rules[0].Resource = "" }, "names no resource"},
		"the Lease itself": {func(e *Election) {
			e.Rules[0] = Rule{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"update"}}
		}, "never fenced"},
		"portable objects":   {func(e *Election) { e.Rules[0] = Rule{Group: "cle.dev", Resource: "*", Verbs: []string{"update"}} }, "never fenced"},
		"events":             {func(e *Election) { e.Rules[0] = Rule{Group: "", Resource: "events", Verbs: []string{"create"}} }, "never fenced"},
		"bad namespace":      {func(e *Election) { e.Namespace = "Team_A" }, "the Lease's namespace"},
		"bad ServiceAccount": {func(e *Election) { e.ServiceAccount = "" }, "the ServiceAccount"},
		"bad fenced ns":      {func(e *Election) { e.Namespaces = []string{"a b"} }, `namespace "a b"`},
	} {
		e := election()
		tc.change(&e)
		if _, _, err := Objects(e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	// A rule of another resource of a group with excluded ones is fine.
	e := election()
	e.Rules[0] = Rule{Group: "", Resource: "configmaps", Verbs: []string{"update"}}
	if _, _, err := Objects(e); err != nil {
		t.Errorf("configmaps: %v", err)
	}
}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 63)
	lease := strings.Repeat("l", 253)
	name := Name(long, lease)
	if len(name) > validation.DNS1123SubdomainMaxLength || len(validation.IsDNS1123Subdomain(name)) > 0 {
		t.Errorf("name %q (%d) is not a valid name", name, len(name))
	}
	if Name(long, lease+"x") == name {
		t.Error("two Leases with a long common prefix share a name")
	}
}

func TestParseResource(t *testing.T) {
	for in, want := range map[string]Rule{
		"configmaps":             {Resource: "configmaps"},
		"deployments.apps":       {Group: "apps", Resource: "deployments"},
		"deployments.apps/scale": {Group: "apps", Resource: "deployments/scale"},
		"*.apps":                 {Group: "apps", Resource: "*"},
		"widgets.example.com":    {Group: "example.com", Resource: "widgets"},
	} {
		got, err := ParseResource(in)
		if err != nil || got.Group != want.Group || got.Resource != want.Resource {
			t.Errorf("ParseResource(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v reads back as %q, want %q", got, got.String(), in)
		}
	}
	for _, in := range []string{"", ".apps", "deployments.apps/", "a/b/c"} {
		if _, err := ParseResource(in); err == nil {
			t.Errorf("ParseResource(%q) accepted", in)
		}
	}
}

func TestObjectsByToken(t *testing.T) {
	e := election()
	e.ByToken, e.ServiceAccount = true, ""
	policy, binding, err := Objects(e)
	if err != nil {
		t.Fatal(err)
	}
	if policy.Name != "cle-fence-token.team-a.my-controller" || policy.Spec.ParamKind != nil || binding.Spec.ParamRef != nil {
		t.Errorf("policy %s with paramKind %v, paramRef %v: want no parameter", policy.Name, policy.Spec.ParamKind, binding.Spec.ParamRef)
	}
	if len(policy.Spec.MatchConditions) != 0 {
		t.Errorf("match conditions %v without a ServiceAccount, want none: every user's updates", policy.Spec.MatchConditions)
	}
	if ops := policy.Spec.MatchConstraints.ResourceRules[0].Operations; !slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}) {
		t.Errorf("operations %v, want UPDATE only: creates and deletes have no token to compare", ops)
	}
	if v := policy.Spec.Validations[0].Expression; !strings.Contains(v, "int(variables.token) >= int(variables.stored)") {
		t.Errorf("validation %s", v)
	}
	e.Rules[0].Verbs = []string{"create", "delete"}
	if _, _, err := Objects(e); err == nil || !strings.Contains(err.Error(), "judges updates and patches only") {
		t.Errorf("a token fence of creates and deletes: %v", err)
	}
}

func TestStamp(t *testing.T) {
	obj := &metav1.ObjectMeta{Annotations: map[string]string{"other": "x"}}
	Stamp(obj, 7)
	if obj.Annotations[TokenAnnotation] != "7" || obj.Annotations["other"] != "x" {
		t.Errorf("annotations %v", obj.Annotations)
	}
	bare := &metav1.ObjectMeta{}
	Stamp(bare, 2147483647)
	if bare.Annotations[TokenAnnotation] != "2147483647" {
		t.Errorf("annotations %v", bare.Annotations)
	}
}
