package fence

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// KeeperName names the policy and binding of Keeper.
const KeeperName = "cle-lease-params"

// Keeper returns a ValidatingAdmissionPolicy and binding that match no
// request and take a Lease as their parameter, so that kube-apiserver keeps
// its watch of Leases as policy parameters running while no fence is bound.
//
// kube-apiserver (up to 1.36 at least; kubernetes/kubernetes#130887) stops
// that watch as soon as no binding of a policy with a Lease parameter is
// left, and never starts it again in that process: a fence bound afterwards
// finds no Lease (and, its parameterNotFoundAction being Allow, refuses
// nothing), or finds the Lease as it was when the watch stopped, naming a
// holder that may no longer lead. With the keeper bound first and never
// removed, removing the last fence does not stop the watch. A
// kube-apiserver that stopped it already needs a restart.
func Keeper() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	labels := map[string]string{"app.kubernetes.io/part-of": "cle", "app.kubernetes.io/component": "fence"}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: KeeperName, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			// A resource no server has: the policy is never evaluated.
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"cle.dev"}, APIVersions: []string{"v1beta1"}, Resources: []string{"lease-param-keepers"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: KeeperName, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        KeeperName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			ParamRef: &admissionregistrationv1.ParamRef{
				Name: KeeperName, Namespace: metav1.NamespaceSystem,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
		},
	}
	return policy, binding
}
