package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// TestFenceCommand: kubectl cle fence prints the policy and binding of
// pkg/fence for the Lease of -n, needs no cluster, and says what is wrong
// with its flags.
func TestFenceCommand(t *testing.T) {
	s, out, errOut := streams()
	args := []string{"fence", "my-controller", "-n", "team-a", "--kubeconfig", "/nonexistent", "--service-account=my-controller",
		"--resource=deployments.apps", "--resource=configmaps", "--verbs=create,update", "--namespaces=team-a"}
	if code := Main(context.Background(), args, s); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	docs := strings.Split(out.String(), "---\n")
	if len(docs) != 2 {
		t.Fatalf("want a policy and a binding, got %d documents:\n%s", len(docs), out.String())
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	if policy.Kind != "ValidatingAdmissionPolicy" || binding.Kind != "ValidatingAdmissionPolicyBinding" ||
		binding.Spec.ParamRef.Namespace != "team-a" || binding.Spec.ParamRef.Name != "my-controller" {
		t.Errorf("policy %s, binding %s for %+v", policy.Kind, binding.Kind, binding.Spec.ParamRef)
	}
	rules := policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 2 || rules[0].APIGroups[0] != "apps" || rules[1].APIGroups[0] != "" || len(rules[0].Operations) != 2 {
		t.Errorf("rules %+v, want deployments.apps and configmaps, created and updated", rules)
	}

	s, out, _ = streams()
	if code := Main(context.Background(), append(args, "-o", "json"), s); code != 0 {
		t.Fatalf("-o json: exit %d", code)
	}
	var list struct {
		Kind  string
		Items []map[string]any
	}
	if err := json.Unmarshal([]byte(out.String()), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 {
		t.Errorf("-o json: %v, %+v", err, list)
	}

	// By token: no ServiceAccount needed, updates only.
	s, out, errOut = streams()
	if code := Main(context.Background(), []string{"fence", "l", "-n", "ns", "--by-token", "--resource=configmaps"}, s); code != 0 {
		t.Fatalf("--by-token: exit %d: %s", code, errOut.String())
	}
	policy = admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := yaml.UnmarshalStrict([]byte(strings.Split(out.String(), "---\n")[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if policy.Name != "cle-fence-token.ns.l" || policy.Spec.ParamKind != nil || len(policy.Spec.MatchConditions) != 0 ||
		len(policy.Spec.MatchConstraints.ResourceRules[0].Operations) != 1 {
		t.Errorf("--by-token policy %s: paramKind %v, match conditions %v, operations %v; want no parameter, every user, updates",
			policy.Name, policy.Spec.ParamKind, policy.Spec.MatchConditions, policy.Spec.MatchConstraints.ResourceRules[0].Operations)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fence", "l", "--resource=configmaps"}, "--service-account is required"},
		{[]string{"fence", "l", "--by-token", "--resource=configmaps", "--verbs=create"}, "judges updates and patches only"},
		{[]string{"fence", "l", "--service-account=sa"}, `required flag(s) "resource" not set`},
		{[]string{"fence", "l", "--service-account=sa", "--resource=leases.coordination.k8s.io"}, "never fenced"},
		{[]string{"fence", "l", "--service-account=sa", "--resource=a/b/c"}, "want RESOURCE[.GROUP][/SUBRESOURCE]"},
		{[]string{"fence", "l", "--service-account=sa", "--resource=configmaps", "--verbs=get"}, `verb "get" is not a write`},
		{[]string{"fence", "l", "--service-account=sa", "--resource=configmaps", "-o", "wide"}, `unsupported output format "wide"`},
	} {
		s, _, errOut := streams()
		if code := Main(context.Background(), append(tc.args, "-n", "ns", "--kubeconfig", "/nonexistent"), s); code == 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error saying %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
