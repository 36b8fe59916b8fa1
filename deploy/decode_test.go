package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// scheme knows the kinds the manifests may use; any other kind fails to
// decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict is the decoder the API server uses with strict field validation:
// an unknown field, a field spelt in the wrong case and a duplicate field
// are errors. It does not default or convert.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// splitDocuments splits multi-document YAML on its "---" lines, as
// kubectl does, and drops empty documents.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// decodeAll decodes every document of multi-document YAML strictly into
// its Kubernetes API type.
func decodeAll(data []byte) ([]runtime.Object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	for i, doc := range docs {
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if gvk.Kind == "" {
			return nil, fmt.Errorf("document %d: no kind", i)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// The decoder the manifest tests rely on does reject what it must: each
// case is a valid Deployment with one mistake.
func TestStrictDecoderRejectsMistakes(t *testing.T) {
	const valid = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: x
spec:
  selector:
    matchLabels: {app: x}
  template:
    metadata:
      labels: {app: x}
    spec:
      containers:
        - name: x
          image: x
          imagePullPolicy: IfNotPresent
`
	objs, err := decodeAll([]byte(valid))
	require.NoError(t, err, "the valid document must decode, or the cases below prove nothing")
	require.Len(t, objs, 1)
	require.IsType(t, &appsv1.Deployment{}, objs[0])
	assert.Equal(t, corev1.PullIfNotPresent, objs[0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].ImagePullPolicy)

	for name, c := range map[string]struct{ old, new string }{
		"misspelt field":        {"imagePullPolicy:", "imagePullPolicyy:"},
		"field in another case": {"imagePullPolicy:", "imagepullpolicy:"},
		"field at wrong level":  {"      containers:", "      image: x\n      containers:"},
		"duplicate field":       {"          image: x", "          image: x\n          image: y"},
		"unknown kind":          {"kind: Deployment", "kind: Deploymnet"},
		"removed apiVersion":    {"apiVersion: apps/v1", "apiVersion: extensions/v1beta1"},
		"wrong value type":      {"name: x\nspec:", "name: x\nspec:\n  replicas: two"},
		"no kind":               {"kind: Deployment\n", ""},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(valid, c.old, c.new, 1)
			require.NotEqual(t, valid, doc, "case %q does not change the document", name)
			_, err := decodeAll([]byte(doc))
			assert.Error(t, err, "decoded:\n%s", doc)
		})
	}
}
