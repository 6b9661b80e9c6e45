package fleetadmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/zketcd/zketcd/internal/tenant"
	"github.com/zketcd/zketcd/internal/zkstore"
)

// HTTPPrefix is where the HTTP API is served.
const HTTPPrefix = "/zketcd/v1/tenants"

// maxBodyBytes bounds a request body of the HTTP API.
const maxBodyBytes = 64 << 10

// Tenant is a tenant as the HTTP API shows it.
type Tenant struct {
	Name    string        `json:"name"`
	CNs     []string      `json:"cns"`
	State   string        `json:"state"`
	Created time.Time     `json:"created"`
	Limits  tenant.Limits `json:"limits"`
	Roles   []string      `json:"roles,omitempty"`
	// Root is where the tenant's data lives once `zketcd tenant move`
	// moved it ("servers:root" on another ensemble; absent: the fleet's
	// roots/NAME).
	Root string `json:"root,omitempty"`
}

func fromRecord(r zkstore.TenantRecord) Tenant {
	l, _ := tenant.DecodeLimits(r.Limits)
	t := Tenant{Name: r.Name, CNs: r.CNs, State: r.State, Created: r.Created, Limits: l, Roles: r.Roles}
	if r.Root != "" {
		t.Root = r.Place("").String()
	}
	return t
}

// Handler serves the HTTP API for f:
//
//	GET    /zketcd/v1/tenants                 every tenant
//	POST   /zketcd/v1/tenants                 create {"name", "cns", "limits"} (cns default: [name])
//	GET    /zketcd/v1/tenants/NAME            one tenant
//	PUT    /zketcd/v1/tenants/NAME/limits     replace its limits (a Limits object; 0 fields: the fleet's defaults)
//	DELETE /zketcd/v1/tenants/NAME            delete it (asynchronous: 202; its znodes go once no instance serves it)
//	GET    /zketcd/v1/tenants/NAME/snapshot   its data as an etcd snapshot file
//
// Errors are JSON {"error": "..."} with the status that fits (400, 404,
// 409, 503).
func Handler(f Fleet) http.Handler {
	return &httpAPI{f: f}
}

type httpAPI struct{ f Fleet }

func (h *httpAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, HTTPPrefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		httpError(w, http.StatusNotFound, errors.New("not found"))
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	switch {
	case len(parts) == 0 && r.Method == http.MethodGet:
		h.list(w)
	case len(parts) == 0 && r.Method == http.MethodPost:
		h.create(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		h.get(w, parts[0])
	case len(parts) == 1 && r.Method == http.MethodDelete:
		h.delete(w, parts[0])
	case len(parts) == 2 && parts[1] == "limits" && r.Method == http.MethodPut:
		h.limits(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "snapshot" && r.Method == http.MethodGet:
		h.snapshot(w, r, parts[0])
	default:
		httpError(w, http.StatusNotFound, fmt.Errorf("no %s %s in the tenant API", r.Method, r.URL.Path))
	}
}

func (h *httpAPI) list(w http.ResponseWriter) {
	recs, _, _, err := h.f.TenantRegistry().Tenants(false)
	if err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	out := make([]Tenant, len(recs))
	for i, r := range recs {
		out[i] = fromRecord(r)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenants": out})
}

// createRequest is POST's body.
type createRequest struct {
	Name   string        `json:"name"`
	CNs    []string      `json:"cns"`
	Limits tenant.Limits `json:"limits"`
}

func (h *httpAPI) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decodeBody(r, &req); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if err := tenant.ValidName(req.Name); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if len(req.CNs) == 0 {
		req.CNs = []string{req.Name}
	}
	for _, cn := range req.CNs {
		if err := tenant.ValidCN(cn); err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
	}
	rec, err := h.f.TenantRegistry().CreateTenant(zkstore.TenantRecord{Name: req.Name, CNs: req.CNs, Limits: req.Limits.Encode()})
	if err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, fromRecord(rec))
}

func (h *httpAPI) get(w http.ResponseWriter, name string) {
	rec, err := h.f.TenantRegistry().Tenant(name)
	if err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, fromRecord(rec))
}

func (h *httpAPI) delete(w http.ResponseWriter, name string) {
	if _, err := h.f.TenantRegistry().Tenant(name); err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	if err := h.f.Delete(name); err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"name": name, "state": zkstore.TenantDeleting})
}

func (h *httpAPI) limits(w http.ResponseWriter, r *http.Request, name string) {
	var l tenant.Limits
	if err := decodeBody(r, &l); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	reg := h.f.TenantRegistry()
	for range casRetries {
		rec, err := reg.Tenant(name)
		if err != nil {
			httpError(w, statusOf(err), err)
			return
		}
		rec, err = reg.SetTenantLimits(rec, l.Encode())
		if err == nil {
			writeJSON(w, http.StatusOK, fromRecord(rec))
			return
		}
		if errors.Is(err, zkstore.ErrTenantNotFound) {
			httpError(w, http.StatusNotFound, err)
			return
		}
	}
	httpError(w, http.StatusConflict, errors.New("the tenant's record kept changing"))
}

func (h *httpAPI) snapshot(w http.ResponseWriter, r *http.Request, name string) {
	rec, err := h.f.TenantRegistry().Tenant(name)
	if err != nil {
		httpError(w, statusOf(err), err)
		return
	}
	if rec.State != zkstore.TenantActive {
		httpError(w, http.StatusNotFound, fmt.Errorf("tenant %s is being deleted", name))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".db"))
	if _, err := h.f.Snapshot(r.Context(), name, w); err != nil {
		// Headers may be out: the client sees a short file, which
		// etcdutl refuses by its checksum.
		httpError(w, statusOf(err), err)
	}
}

// statusOf maps the registry's errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, zkstore.ErrTenantNotFound):
		return http.StatusNotFound
	case errors.Is(err, zkstore.ErrTenantExists):
		return http.StatusConflict
	case errors.Is(err, zkstore.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
