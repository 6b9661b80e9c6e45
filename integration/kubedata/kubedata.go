// Package kubedata generates Kubernetes-like etcd data: real objects of
// several kinds, serialized as kube-apiserver stores them, under the keys it
// stores them at.
//
// Built-in kinds are protobuf in kube-apiserver's storage envelope (the
// bytes "k8s\x00" and a runtime.Unknown carrying apiVersion, kind and the
// object's protobuf), produced by apimachinery's own protobuf serializer;
// the custom resource kind is JSON, as kube-apiserver stores custom
// resources. Keys are /registry/<resource>/<namespace>/<name> (custom
// resources: /registry/<group>/<resource>/<namespace>/<name>).
//
// Generation is deterministic: object i of a Generator with seed s is the
// same on every run and every machine, so loaders can generate objects in
// parallel, and a check can regenerate what it expects. A Generator is safe
// for concurrent use (it holds no mutable state).
package kubedata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Kind is one kind of the mix.
type Kind struct {
	// Name is the kind's short name ("pod", "configmap", …).
	Name string
	// Resource is the path segment of its keys after /registry/
	// ("pods", "example.com/widgets").
	Resource string
	// Weight is its share of the objects, in objects per 1,000.
	Weight int
	// JSON tells whether its values are JSON (custom resources) rather
	// than protobuf.
	JSON bool
}

// Mix is the kinds, their shares and their encodings. The shares follow
// what large clusters hold (many pods and events, a lease per node and per
// controller, a few large ConfigMaps); the sizes each generator draws are
// in its comment.
var Mix = []Kind{
	{Name: "pod", Resource: "pods", Weight: 300},
	{Name: "event", Resource: "events", Weight: 250},
	{Name: "configmap", Resource: "configmaps", Weight: 100},
	{Name: "secret", Resource: "secrets", Weight: 80},
	{Name: "lease", Resource: "leases", Weight: 70},
	{Name: "endpointslice", Resource: "endpointslices", Weight: 100},
	{Name: "widget", Resource: "example.com/widgets", Weight: 100, JSON: true},
}

// Object is one generated object.
type Object struct {
	// Key is the etcd key kube-apiserver stores it at.
	Key string
	// Value is the stored bytes.
	Value []byte
	// Kind is Mix[i].Name of its kind.
	Kind string
}

// Generator generates the objects of one seed.
type Generator struct {
	seed       uint64
	namespaces int
	proto      *protobuf.Serializer
	// cumulative weights of Mix, for picking a kind.
	cum []int
}

// New returns the generator of seed. Objects are spread over 200
// namespaces.
func New(seed uint64) *Generator {
	g := &Generator{seed: seed, namespaces: 200, proto: protobuf.NewSerializer(nil, nil)}
	total := 0
	for _, k := range Mix {
		total += k.Weight
		g.cum = append(g.cum, total)
	}
	return g
}

// Object returns object i (i ≥ 0). Distinct i give distinct keys.
func (g *Generator) Object(i int) Object {
	r := rand.New(rand.NewPCG(g.seed, uint64(i)))
	pick := r.IntN(g.cum[len(g.cum)-1])
	ki := 0
	for pick >= g.cum[ki] {
		ki++
	}
	k := Mix[ki]
	ns := fmt.Sprintf("team-%03d", r.IntN(g.namespaces))
	name := objectName(r, k.Name, i)
	var obj runtime.Object
	var jsonValue []byte
	switch k.Name {
	case "pod":
		obj = g.pod(r, ns, name)
	case "event":
		obj = g.event(r, ns, name)
	case "configmap":
		obj = g.configMap(r, ns, name)
	case "secret":
		obj = g.secret(r, ns, name)
	case "lease":
		ns = "kube-node-lease"
		obj = g.lease(r, ns, name)
	case "endpointslice":
		obj = g.endpointSlice(r, ns, name)
	case "widget":
		jsonValue = g.widget(r, ns, name)
	}
	out := Object{Key: "/registry/" + k.Resource + "/" + ns + "/" + name, Kind: k.Name}
	if jsonValue != nil {
		out.Value = jsonValue
		return out
	}
	var buf bytes.Buffer
	if err := g.proto.Encode(obj, &buf); err != nil {
		// Every object here is a built-in type with generated protobuf
		// methods: encoding cannot fail.
		panic(fmt.Sprintf("kubedata: encode %s: %v", k.Name, err))
	}
	out.Value = buf.Bytes()
	return out
}

// Decode parses a protobuf value Object produced (the storage envelope)
// back into its apiVersion, kind and object bytes: a check that a value is
// what kube-apiserver would read.
func Decode(value []byte) (apiVersion, kind string, raw []byte, err error) {
	prefix := []byte{'k', '8', 's', 0}
	if !bytes.HasPrefix(value, prefix) {
		return "", "", nil, fmt.Errorf("no k8s protobuf prefix")
	}
	var u runtime.Unknown
	if err := u.Unmarshal(value[len(prefix):]); err != nil {
		return "", "", nil, err
	}
	return u.APIVersion, u.Kind, u.Raw, nil
}

const alnum = "bcdfghjklmnpqrstvwxz2456789"

func randString(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// objectName is a name of kind's style that embeds i (so names are unique
// per generator).
func objectName(r *rand.Rand, kind string, i int) string {
	app := apps[r.IntN(len(apps))]
	switch kind {
	case "pod":
		return fmt.Sprintf("%s-%s-%s-%d", app, randString(r, 10), randString(r, 5), i)
	case "event":
		return fmt.Sprintf("%s-%s.%x", app, randString(r, 5), uint64(i)<<20|uint64(r.IntN(1<<20)))
	case "lease":
		return fmt.Sprintf("node-%06d", i)
	case "endpointslice":
		return fmt.Sprintf("%s-%s-%d", app, randString(r, 5), i)
	}
	return fmt.Sprintf("%s-%s-%d", app, kind, i)
}

var apps = []string{"checkout", "frontend", "payments", "search", "recommendation", "inventory",
	"auth", "gateway", "ledger", "notifications", "catalog", "metrics-agent", "log-shipper", "cart"}

var images = []string{"registry.example.com/platform/%s:v1.%d.%d", "ghcr.io/example/%s@sha256:%s",
	"docker.io/library/%s:1.%d"}

// base is the ObjectMeta kube-apiserver fills in on create: uid, creation
// time, generation, labels, and the managed fields of its field manager.
func base(r *rand.Rand, ns, name, manager string, fields string) metav1.ObjectMeta {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(300*24*3600)) * time.Second)
	app := apps[r.IntN(len(apps))]
	m := metav1.ObjectMeta{
		Name:              name,
		Namespace:         ns,
		UID:               types.UID(uuid(r)),
		CreationTimestamp: metav1.NewTime(created),
		Labels: map[string]string{
			"app.kubernetes.io/name":       app,
			"app.kubernetes.io/instance":   app + "-" + randString(r, 4),
			"app.kubernetes.io/managed-by": "helm",
			"pod-template-hash":            randString(r, 10),
		},
	}
	if fields != "" {
		ts := metav1.NewTime(created)
		m.ManagedFields = []metav1.ManagedFieldsEntry{{
			Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &ts, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields),
		}}
	}
	return m
}

func uuid(r *rand.Rand) string {
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff|0x4000,
		r.Uint32()&0x3fff|0x8000, r.Uint64()&0xffffffffffff)
}

func hex(r *rand.Rand, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[r.IntN(16)]
	}
	return string(b)
}

const podFields = `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/name":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"%s\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:readinessProbe":{".":{},"f:failureThreshold":{},"f:httpGet":{".":{},"f:path":{},"f:port":{},"f:scheme":{}},"f:periodSeconds":{},"f:successThreshold":{},"f:timeoutSeconds":{}},"f:resources":{".":{},"f:limits":{".":{},"f:cpu":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{},"f:volumeMounts":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:serviceAccount":{},"f:serviceAccountName":{},"f:terminationGracePeriodSeconds":{},"f:volumes":{}}}`

// pod: 2–9 KiB: 1–3 containers with env, ports, probes, resources and
// mounts, an owner reference, status with conditions and container
// statuses, managed fields.
func (g *Generator) pod(r *rand.Rand, ns, name string) runtime.Object {
	app := apps[r.IntN(len(apps))]
	owner := uuid(r)
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: base(r, ns, name, "kube-controller-manager", fmt.Sprintf(podFields, owner, app)),
	}
	p.GenerateName = name[:len(name)-5]
	ctrl := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
		Name: app + "-" + randString(r, 10), UID: types.UID(owner), Controller: &ctrl, BlockOwnerDeletion: &ctrl}}
	nc := 1 + r.IntN(3)
	for c := 0; c < nc; c++ {
		cn := app
		if c > 0 {
			cn = []string{"istio-proxy", "log-shipper", "config-reloader"}[c-1]
		}
		ct := corev1.Container{
			Name:                     cn,
			Image:                    fmt.Sprintf(images[r.IntN(len(images))], cn, r.IntN(40), r.IntN(10)),
			ImagePullPolicy:          corev1.PullIfNotPresent,
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			Ports:                    []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(fmt.Sprintf("%dm", 50+r.IntN(950))),
					corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", 64+r.IntN(2000)))},
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(fmt.Sprintf("%d", 1+r.IntN(4))),
					corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dGi", 1+r.IntN(8)))},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
			VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-" + randString(r, 5), ReadOnly: true,
				MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
		}
		for e := 0; e < 3+r.IntN(20); e++ {
			ct.Env = append(ct.Env, corev1.EnvVar{Name: strings.ToUpper(fmt.Sprintf("%s_SETTING_%d", cn, e)),
				Value: fmt.Sprintf("%s.%s.svc.cluster.local:%d", apps[r.IntN(len(apps))], ns, 1000+r.IntN(9000))})
		}
		p.Spec.Containers = append(p.Spec.Containers, ct)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cn, Ready: true, RestartCount: int32(r.IntN(3)), Image: ct.Image,
			ImageID:     "docker-pullable://" + ct.Image + "@sha256:" + hex(r, 64),
			ContainerID: "containerd://" + hex(r, 64),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: p.CreationTimestamp}},
		})
	}
	grace := int64(30)
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.DNSPolicy = corev1.DNSClusterFirst
	p.Spec.ServiceAccountName = app
	p.Spec.NodeName = fmt.Sprintf("node-%06d", r.IntN(5000))
	p.Spec.SchedulerName = "default-scheduler"
	p.Spec.Volumes = []corev1.Volume{{Name: p.Spec.Containers[0].VolumeMounts[0].Name, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		}}}}}
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.QOSClass = corev1.PodQOSBurstable
	p.Status.HostIP = fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), r.IntN(256))
	p.Status.PodIP = fmt.Sprintf("10.%d.%d.%d", 100+r.IntN(100), r.IntN(256), r.IntN(256))
	p.Status.StartTime = &p.CreationTimestamp
	for _, c := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue,
			LastTransitionTime: p.CreationTimestamp})
	}
	return p
}

// event: 0.5–1.5 KiB, a kubelet or controller event about a pod.
func (g *Generator) event(r *rand.Rand, ns, name string) runtime.Object {
	reasons := []string{"Scheduled", "Pulling", "Pulled", "Created", "Started", "Killing", "BackOff", "Unhealthy", "SuccessfulCreate"}
	reason := reasons[r.IntN(len(reasons))]
	e := &corev1.Event{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: base(r, ns, name, "", ""),
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name[:strings.IndexByte(name, '.')],
			UID: types.UID(uuid(r)), APIVersion: "v1", ResourceVersion: fmt.Sprint(r.IntN(1 << 30)), FieldPath: "spec.containers{app}"},
		Reason: reason,
		Message: fmt.Sprintf("%s: container image %q already present on machine; readiness probe failed: Get \"http://10.%d.%d.%d:8080/healthz\": context deadline exceeded",
			reason, fmt.Sprintf(images[0], apps[r.IntN(len(apps))], r.IntN(40), r.IntN(10)), r.IntN(256), r.IntN(256), r.IntN(256)),
		Source:              corev1.EventSource{Component: "kubelet", Host: fmt.Sprintf("node-%06d", r.IntN(5000))},
		FirstTimestamp:      metav1.NewTime(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(1e6)) * time.Second)),
		Count:               int32(1 + r.IntN(50)),
		Type:                corev1.EventTypeNormal,
		ReportingController: "kubelet",
		ReportingInstance:   fmt.Sprintf("node-%06d", r.IntN(5000)),
	}
	e.Labels = nil
	e.LastTimestamp = e.FirstTimestamp
	return e
}

// configMap: mostly 0.5–8 KiB of configuration text; one in 50 is 40–100
// KiB (dashboards, rule files, bundles).
func (g *Generator) configMap(r *rand.Rand, ns, name string) runtime.Object {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: base(r, ns, name, "helm", `{"f:data":{".":{},"f:config.yaml":{}},"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}}}}`),
		Data:       map[string]string{},
	}
	size := 400 + r.IntN(7800)
	if r.IntN(50) == 0 {
		size = 40<<10 + r.IntN(60<<10)
	}
	var b strings.Builder
	for b.Len() < size {
		fmt.Fprintf(&b, "%s:\n  endpoint: %s.%s.svc.cluster.local:%d\n  timeout: %dms\n  retries: %d\n  enabled: %t\n  weight: %d\n",
			apps[r.IntN(len(apps))]+"-"+randString(r, 4), apps[r.IntN(len(apps))], ns, 1000+r.IntN(9000), 100*r.IntN(50), r.IntN(6), r.IntN(2) == 0, r.IntN(100))
	}
	cm.Data["config.yaml"] = b.String()
	return cm
}

// secret: 1–6 KiB: service-account-like tokens and TLS material (random
// bytes: incompressible, as real keys and tokens are).
func (g *Generator) secret(r *rand.Rand, ns, name string) runtime.Object {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: base(r, ns, name, "helm", `{"f:data":{".":{},"f:tls.crt":{},"f:tls.key":{}},"f:type":{}}`),
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{},
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		v := make([]byte, 300+r.IntN(1700))
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		s.Data[k] = v
	}
	return s
}

// lease: ~0.3–0.5 KiB: a node heartbeat lease.
func (g *Generator) lease(r *rand.Rand, ns, name string) runtime.Object {
	holder := name
	dur := int32(40)
	renew := metav1.NewMicroTime(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(1e6)) * time.Millisecond))
	l := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: base(r, ns, name, "kubelet", `{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"x\"}":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`),
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew},
	}
	l.Labels = nil
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(uuid(r))}}
	return l
}

// endpointSlice: 1–10 KiB: 5–80 endpoints of a service.
func (g *Generator) endpointSlice(r *rand.Rand, ns, name string) runtime.Object {
	es := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  base(r, ns, name, "endpointslice-controller.k8s.io", `{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}}},"f:ports":{}}`),
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	es.Labels["kubernetes.io/service-name"] = name
	es.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
	port, proto, pname := int32(8080), corev1.ProtocolTCP, "http"
	es.Ports = []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}}
	n := 5 + r.IntN(76)
	t := true
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("node-%06d", r.IntN(5000))
		zone := fmt.Sprintf("zone-%c", 'a'+r.IntN(3))
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 100+r.IntN(100), r.IntN(256), r.IntN(256))},
			Conditions: discoveryv1.EndpointConditions{Ready: &t, Serving: &t},
			NodeName:   &node, Zone: &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("%s-%s-%s", apps[r.IntN(len(apps))], randString(r, 10), randString(r, 5)),
				UID: types.UID(uuid(r))},
		})
	}
	return es
}

// widget: 1–8 KiB of JSON: a custom resource with a spec of nested
// settings and a status with conditions, stored as kube-apiserver stores
// custom resources (JSON with apiVersion, kind and metadata).
func (g *Generator) widget(r *rand.Rand, ns, name string) []byte {
	meta := base(r, ns, name, "widget-operator", `{"f:spec":{".":{},"f:replicas":{},"f:rules":{}},"f:status":{".":{},"f:conditions":{}}}`)
	type rule struct {
		Host    string            `json:"host"`
		Path    string            `json:"path"`
		Backend string            `json:"backend"`
		Weight  int               `json:"weight"`
		Headers map[string]string `json:"headers,omitempty"`
	}
	var rules []rule
	for i := 0; i < 3+r.IntN(30); i++ {
		rules = append(rules, rule{Host: apps[r.IntN(len(apps))] + ".example.com", Path: "/" + randString(r, 6),
			Backend: apps[r.IntN(len(apps))] + ":8080", Weight: r.IntN(100),
			Headers: map[string]string{"x-team": ns, "x-route": randString(r, 8)}})
	}
	obj := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   meta,
		"spec":       map[string]any{"replicas": 1 + r.IntN(10), "rules": rules},
		"status": map[string]any{"observedGeneration": 1 + r.IntN(20), "conditions": []map[string]any{
			{"type": "Ready", "status": "True", "reason": "Reconciled", "lastTransitionTime": meta.CreationTimestamp},
			{"type": "Degraded", "status": "False", "reason": "AsExpected", "lastTransitionTime": meta.CreationTimestamp},
		}},
	}
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("kubedata: encode widget: %v", err))
	}
	return append(b, '\n')
}

// GVK returns the group, version and kind Object's protobuf values of kind
// name carry (custom resources: example.com/v1 Widget).
func GVK(name string) schema.GroupVersionKind {
	switch name {
	case "pod":
		return corev1.SchemeGroupVersion.WithKind("Pod")
	case "event":
		return corev1.SchemeGroupVersion.WithKind("Event")
	case "configmap":
		return corev1.SchemeGroupVersion.WithKind("ConfigMap")
	case "secret":
		return corev1.SchemeGroupVersion.WithKind("Secret")
	case "lease":
		return coordinationv1.SchemeGroupVersion.WithKind("Lease")
	case "endpointslice":
		return discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")
	}
	return schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
}
