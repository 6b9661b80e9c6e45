package e2e

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/zketcd/zketcd/integration/kubelab"
)

// shellFlags returns the flags of a documented command line (continuation
// lines joined, quotes dropped): "--name value", "--name=value" and bare
// boolean flags (those in bools).
func shellFlags(block string, bools ...string) map[string]string {
	words := strings.Fields(strings.ReplaceAll(block, "\\\n", " "))
	flags := map[string]string{}
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], `"'`)
		name, ok := strings.CutPrefix(w, "--")
		if !ok {
			continue
		}
		if n, v, eq := strings.Cut(name, "="); eq {
			flags[n] = strings.Trim(v, `"'`)
			continue
		}
		if slices.Contains(bools, name) || i+1 == len(words) || strings.HasPrefix(words[i+1], "--") {
			flags[name] = ""
			continue
		}
		flags[name] = strings.Trim(words[i+1], `"'`)
		i++
	}
	return flags
}

func names(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestKubernetesDocFlags checks docs/kubernetes.md "In production"
// against what make e2e runs: the zketcd flags are kubelab.ZketcdFlags',
// kube-apiserver's store flags are those kubelab.APIServerFlags adds for
// the secure shape, and kubeadm's etcd.external says the same as those.
func TestKubernetesDocFlags(t *testing.T) {
	blocks := docBlocks(t, "docs/kubernetes.md", "kube-flags")
	for _, want := range []string{"zketcd", "kube-apiserver", "kubeadm"} {
		if blocks[want] == "" {
			t.Fatalf("docs/kubernetes.md has no %q flags block", want)
		}
	}

	doc := shellFlags(blocks["zketcd"], "client-cert-auth")
	e2e, _ := kubelab.ParseFlags(kubelab.ZketcdFlags(kubelab.ZketcdSite{}, kubelab.ZketcdRoot))
	delete(e2e, "log-level") // the default
	if got, want := names(doc), names(e2e); !slices.Equal(got, want) {
		t.Errorf("the documented zketcd flags %v differ from those make e2e runs %v", got, want)
	}
	if v, ok := doc["client-cert-auth"]; !ok || v != "" {
		t.Errorf("--client-cert-auth: %q %v", v, ok)
	}
	if !strings.HasPrefix(doc["listen-client-urls"], "https://") {
		t.Errorf("--listen-client-urls=%s is not https", doc["listen-client-urls"])
	}

	api := shellFlags(blocks["kube-apiserver"])
	plain, _ := kubelab.ParseFlags(kubelab.APIServerFlags(kubelab.APIServerSite{}))
	secure, _ := kubelab.ParseFlags(kubelab.APIServerFlags(kubelab.APIServerSite{EtcdCAFile: "ca", EtcdCertFile: "c", EtcdKeyFile: "k"}))
	want := []string{"etcd-servers"}
	for n := range secure {
		if _, ok := plain[n]; !ok {
			want = append(want, n)
		}
	}
	slices.Sort(want)
	if got := names(api); !slices.Equal(got, want) {
		t.Errorf("the documented kube-apiserver flags %v, want the store flags make e2e adds %v", got, want)
	}
	servers := strings.Split(api["etcd-servers"], ",")
	for _, s := range servers {
		if !strings.HasPrefix(s, "https://") {
			t.Errorf("--etcd-servers lists %q: not https", s)
		}
	}
	if len(servers) != 3 {
		t.Errorf("--etcd-servers lists %d instances, want the three of the root", len(servers))
	}

	var kubeadm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Etcd       struct {
			External struct {
				Endpoints []string `json:"endpoints"`
				CAFile    string   `json:"caFile"`
				CertFile  string   `json:"certFile"`
				KeyFile   string   `json:"keyFile"`
			} `json:"external"`
		} `json:"etcd"`
	}
	if err := yaml.UnmarshalStrict([]byte(blocks["kubeadm"]), &kubeadm); err != nil {
		t.Fatalf("kubeadm block: %v", err)
	}
	ext := kubeadm.Etcd.External
	if kubeadm.APIVersion != "kubeadm.k8s.io/v1beta4" || kubeadm.Kind != "ClusterConfiguration" {
		t.Errorf("kubeadm block: %s %s, want kubeadm.k8s.io/v1beta4 ClusterConfiguration", kubeadm.APIVersion, kubeadm.Kind)
	}
	if !slices.Equal(ext.Endpoints, servers) || ext.CAFile != api["etcd-cafile"] || ext.CertFile != api["etcd-certfile"] || ext.KeyFile != api["etcd-keyfile"] {
		t.Errorf("kubeadm's etcd.external %+v says other than the kube-apiserver flags %v", ext, api)
	}

	// The users: kube-apiserver's certificate names the user the etcdctl
	// commands make, and make e2e's lab makes the same.
	tests := docBlocks(t, "docs/kubernetes.md", "kube-test")
	for _, b := range []string{"pki", "auth"} {
		if !strings.Contains(tests[b], kubelab.APIServerUser) {
			t.Errorf("the %q block does not name the user %s", b, kubelab.APIServerUser)
		}
	}
}
