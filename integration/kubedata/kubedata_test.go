package kubedata

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestObjectsAreDeterministicPerSeedAndIndex(t *testing.T) {
	a, b, c := New(7), New(7), New(8)
	for _, i := range []int{0, 1, 99, 12345} {
		x, y, z := a.Object(i), b.Object(i), c.Object(i)
		if x.Key != y.Key || !bytes.Equal(x.Value, y.Value) {
			t.Fatalf("object %d differs between two generators of one seed", i)
		}
		if x.Key == z.Key && bytes.Equal(x.Value, z.Value) {
			t.Fatalf("object %d is the same under another seed", i)
		}
	}
}

type protoObject interface {
	Unmarshal([]byte) error
	GetName() string
	GetNamespace() string
}

func newTyped(kind string) protoObject {
	switch kind {
	case "pod":
		return &corev1.Pod{}
	case "event":
		return &corev1.Event{}
	case "configmap":
		return &corev1.ConfigMap{}
	case "secret":
		return &corev1.Secret{}
	case "lease":
		return &coordinationv1.Lease{}
	case "endpointslice":
		return &discoveryv1.EndpointSlice{}
	}
	return nil
}

// Every value decodes as kube-apiserver reads it: the storage envelope
// naming the kind's apiVersion and kind, the typed object inside, whose
// name and namespace are those of its key.
func TestValuesDecodeAsTheObjectsTheirKeysName(t *testing.T) {
	g := New(1)
	keys := map[string]bool{}
	count := map[string]int{}
	for i := 0; i < 3000; i++ {
		o := g.Object(i)
		if keys[o.Key] {
			t.Fatalf("key %s generated twice", o.Key)
		}
		keys[o.Key] = true
		count[o.Kind]++
		parts := strings.Split(o.Key, "/")
		ns, name := parts[len(parts)-2], parts[len(parts)-1]
		if o.Kind == "widget" {
			var obj struct {
				APIVersion string            `json:"apiVersion"`
				Kind       string            `json:"kind"`
				Metadata   metav1.ObjectMeta `json:"metadata"`
			}
			if err := json.Unmarshal(o.Value, &obj); err != nil {
				t.Fatalf("%s: %v", o.Key, err)
			}
			if obj.APIVersion != "example.com/v1" || obj.Kind != "Widget" || obj.Metadata.Name != name || obj.Metadata.Namespace != ns {
				t.Fatalf("%s: decoded %s %s %s/%s", o.Key, obj.APIVersion, obj.Kind, obj.Metadata.Namespace, obj.Metadata.Name)
			}
			continue
		}
		apiVersion, kind, raw, err := Decode(o.Value)
		if err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
		gvk := GVK(o.Kind)
		if apiVersion != gvk.GroupVersion().String() || kind != gvk.Kind {
			t.Fatalf("%s: envelope says %s %s, want %s", o.Key, apiVersion, kind, gvk)
		}
		obj := newTyped(o.Kind)
		if err := obj.Unmarshal(raw); err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
		if obj.GetName() != name || obj.GetNamespace() != ns {
			t.Fatalf("%s: object is %s/%s", o.Key, obj.GetNamespace(), obj.GetName())
		}
	}
	for _, k := range Mix {
		if count[k.Name] == 0 {
			t.Errorf("no %s among 3000 objects", k.Name)
		}
	}
}

// The sizes stay within what the mix documents: every value between 0.2
// and 100 KiB, a mean of 2–4 KiB, and some large ConfigMaps.
func TestSizesFollowTheDocumentedMix(t *testing.T) {
	g := New(1)
	const n = 20000
	sizes := map[string][]int{}
	total := 0
	for i := 0; i < n; i++ {
		o := g.Object(i)
		sizes[o.Kind] = append(sizes[o.Kind], len(o.Value))
		total += len(o.Value)
		if len(o.Value) < 200 || len(o.Value) > 101<<10 {
			t.Fatalf("%s: %d bytes", o.Key, len(o.Value))
		}
	}
	for _, k := range Mix {
		s := sizes[k.Name]
		sort.Ints(s)
		sum := 0
		for _, v := range s {
			sum += v
		}
		t.Logf("%-13s %5d objects, min %6d, median %6d, max %6d, mean %6d bytes", k.Name, len(s), s[0], s[len(s)/2], s[len(s)-1], sum/len(s))
	}
	mean := total / n
	t.Logf("mean %d bytes", mean)
	if mean < 2<<10 || mean > 4<<10 {
		t.Errorf("mean value size %d bytes, want 2–4 KiB", mean)
	}
	cms := sizes["configmap"]
	if cms[len(cms)-1] < 40<<10 {
		t.Errorf("largest ConfigMap %d bytes: no large ones", cms[len(cms)-1])
	}
}
