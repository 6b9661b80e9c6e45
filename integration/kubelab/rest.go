package kubelab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ObjectMeta is the part of metadata the scenarios use.
type ObjectMeta struct {
	Name            string            `json:"name,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

// Object is a Namespace, ConfigMap or Event (the fields the scenarios use).
type Object struct {
	Kind       string            `json:"kind,omitempty"`
	APIVersion string            `json:"apiVersion,omitempty"`
	Metadata   ObjectMeta        `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
}

// RV returns the resourceVersion as a number (0 if not one).
func (o *Object) RV() int64 { return parseRV(o.Metadata.ResourceVersion) }

// List is a list answer.
type List struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion    string `json:"resourceVersion"`
		Continue           string `json:"continue,omitempty"`
		RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
	} `json:"metadata"`
	Items []Object `json:"items"`
}

// RV returns the list's resourceVersion as a number.
func (l *List) RV() int64 { return parseRV(l.Metadata.ResourceVersion) }

// Status is a metav1.Status.
type Status struct {
	Kind    string `json:"kind"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

func parseRV(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// Create POSTs obj to path and returns the created object.
func (a *APIServer) Create(ctx context.Context, path string, obj any) (*Object, error) {
	var out Object
	return &out, a.Call(ctx, http.MethodPost, path, "", obj, &out)
}

// Get GETs one object.
func (a *APIServer) Get(ctx context.Context, path string) (*Object, error) {
	var out Object
	return &out, a.Call(ctx, http.MethodGet, path, "", nil, &out)
}

// List GETs a list; query is appended as is ("" or "?...").
func (a *APIServer) List(ctx context.Context, path string) (*List, error) {
	var out List
	return &out, a.Call(ctx, http.MethodGet, path, "", nil, &out)
}

// MergePatch sends a JSON merge patch.
func (a *APIServer) MergePatch(ctx context.Context, path string, patch any) (*Object, error) {
	var out Object
	return &out, a.Call(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, &out)
}

// StrategicPatch sends a strategic merge patch.
func (a *APIServer) StrategicPatch(ctx context.Context, path string, patch any) (*Object, error) {
	var out Object
	return &out, a.Call(ctx, http.MethodPatch, path, "application/strategic-merge-patch+json", patch, &out)
}

// Delete DELETEs an object and returns the raw answer kind (Status or the
// object).
func (a *APIServer) Delete(ctx context.Context, path string) (*Object, error) {
	var out Object
	return &out, a.Call(ctx, http.MethodDelete, path, "", nil, &out)
}

// Namespace returns a Namespace object.
func Namespace(name string) Object {
	return Object{Kind: "Namespace", APIVersion: "v1", Metadata: ObjectMeta{Name: name}}
}

// ConfigMap returns a ConfigMap object.
func ConfigMap(name string, data map[string]string) Object {
	return Object{Kind: "ConfigMap", APIVersion: "v1", Metadata: ObjectMeta{Name: name}, Data: data}
}

// WatchEvent is one event of a watch stream.
type WatchEvent struct {
	Type   string          `json:"type"`
	Raw    json.RawMessage `json:"object"`
	Object Object          `json:"-"`
	Status Status          `json:"-"`
	At     time.Time       `json:"-"`
}

// Watch is an open watch through kube-apiserver.
type Watch struct {
	// Events receives the events; it is closed when the stream ends.
	Events <-chan WatchEvent
	cancel context.CancelFunc

	mu    sync.Mutex
	err   error
	ended time.Time
}

// Ended returns when the stream ended (zero while it runs) and why (io.EOF:
// the server closed it).
func (w *Watch) Ended() (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended, w.err
}

// Close stops the watch.
func (w *Watch) Close() { w.cancel() }

// Watch opens GET path with watch=1 (path must already carry its query,
// e.g. "/api/v1/namespaces/x/configmaps?resourceVersion=5"). A non-200
// answer is returned as an *APIError.
func (a *APIServer) Watch(ctx context.Context, path string) (*Watch, error) {
	ctx, cancel := context.WithCancel(ctx)
	sep := "?"
	for _, c := range path {
		if c == '?' {
			sep = "&"
		}
	}
	req, err := a.newRequest(ctx, http.MethodGet, path+sep+"watch=1", nil, "")
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		defer cancel()
		var buf [4096]byte
		n, _ := resp.Body.Read(buf[:])
		e := &APIError{Method: "WATCH", Path: path, Code: resp.StatusCode, Body: string(buf[:n])}
		_ = json.Unmarshal(buf[:n], &e.Status)
		return nil, e
	}
	ch := make(chan WatchEvent, 1024)
	w := &Watch{Events: ch, cancel: cancel}
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev WatchEvent
			err := dec.Decode(&ev)
			if err == nil {
				ev.At = time.Now()
				if ev.Type == "ERROR" {
					err = json.Unmarshal(ev.Raw, &ev.Status)
				} else {
					err = json.Unmarshal(ev.Raw, &ev.Object)
				}
			}
			if err != nil {
				w.mu.Lock()
				if ctx.Err() == nil {
					w.err = err
				}
				w.ended = time.Now()
				w.mu.Unlock()
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w, nil
}

// Next waits up to timeout for the next event; ok is false if the stream
// ended or the time ran out (ended tells which).
func (w *Watch) Next(timeout time.Duration) (ev WatchEvent, ok, ended bool) {
	select {
	case ev, ok := <-w.Events:
		return ev, ok, !ok
	case <-time.After(timeout):
		return WatchEvent{}, false, false
	}
}

func (e WatchEvent) String() string {
	if e.Type == "ERROR" {
		return fmt.Sprintf("ERROR %d %s: %s", e.Status.Code, e.Status.Reason, e.Status.Message)
	}
	return fmt.Sprintf("%s %s rv=%s", e.Type, e.Object.Metadata.Name, e.Object.Metadata.ResourceVersion)
}
