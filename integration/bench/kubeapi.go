package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// kubeAPI is a minimal client of one kube-apiserver's REST API: bearer
// token, JSON, HTTP/1.1 with a connection per concurrent request (as
// separate clients, each with its own connection, are).
type kubeAPI struct {
	base  string
	token string
	hc    *http.Client
}

func newKubeAPI(port int, token string) *kubeAPI {
	return &kubeAPI{
		base:  "https://127.0.0.1:" + strconv.Itoa(port),
		token: token,
		hc: &http.Client{Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the apiserver's self-signed certificate
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     time.Minute,
		}},
	}
}

func (k *kubeAPI) close() { k.hc.CloseIdleConnections() }

// kubeError is a non-2xx answer.
type kubeError struct {
	method, path string
	code         int
	body         string
}

func (e *kubeError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.path, e.code, oneLine(e.body))
}

func isHTTP(err error, code int) bool {
	e, ok := err.(*kubeError)
	return ok && e.code == code
}

func (k *kubeAPI) request(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "zketcd-zkbench/1")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a request and returns the body of a 2xx answer; other answers
// are a *kubeError.
func (k *kubeAPI) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := k.request(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &kubeError{method, path, resp.StatusCode, string(b)}
	}
	return b, nil
}

// kubeMeta is the part of an object's metadata the workloads read.
type kubeMeta struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// list reads every item under path (a collection) in pages of limit, as
// informers and kubectl do, and returns how many there were.
func (k *kubeAPI) list(ctx context.Context, path string, limit int) (items, pages int, err error) {
	cont := ""
	for {
		q := "?limit=" + strconv.Itoa(limit)
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		b, err := k.do(ctx, http.MethodGet, path+q, nil)
		if err != nil {
			return items, pages, err
		}
		var l kubeMeta
		if err := json.Unmarshal(b, &l); err != nil {
			return items, pages, fmt.Errorf("list %s: %w", path, err)
		}
		items += len(l.Items)
		pages++
		if cont = l.Metadata.Continue; cont == "" {
			return items, pages, nil
		}
	}
}

// watch opens a watch on path (a collection) from resourceVersion rv and
// calls event with each event's type and object name until the stream
// ends or ctx is done.
func (k *kubeAPI) watch(ctx context.Context, path, rv string, event func(typ, name string, at time.Time)) error {
	req, err := k.request(ctx, http.MethodGet, path+"?watch=1&allowWatchBookmarks=false&resourceVersion="+url.QueryEscape(rv), nil)
	if err != nil {
		return err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &kubeError{"WATCH", path, resp.StatusCode, string(b)}
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string   `json:"type"`
			Object kubeMeta `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: %w", path, err)
		}
		event(ev.Type, ev.Object.Metadata.Name, time.Now())
	}
}

// kubeValue is the 256 B payload of every ConfigMap (as the etcd-level
// workloads' values).
var kubeValue = strings.Repeat("v", valueSize)

// configMapJSON is a ConfigMap named name with one 256 B value.
func configMapJSON(name string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app": "zkbench"}},
		"data":     map[string]string{"v": kubeValue},
	})
	return b
}

// podJSON is a Pod named name with one container, not scheduled (no
// scheduler runs), no service account token mounted.
func podJSON(name string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app": "zkbench"}},
		"spec": map[string]any{
			"automountServiceAccountToken": false,
			"containers":                   []map[string]any{{"name": "c", "image": "zkbench/pause:1"}},
		},
	})
	return b
}

// relabel returns obj (a full object as the apiserver answered it) with
// label "rev" set to v: an update that changes nothing immutable.
func relabel(obj []byte, v int) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		return nil, fmt.Errorf("object without metadata")
	}
	labels, _ := md["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels["rev"] = strconv.Itoa(v)
	md["labels"] = labels
	return json.Marshal(m)
}
