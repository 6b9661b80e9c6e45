package httpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/zketcd/zketcd/internal/buildinfo"
)

// healthTimeout bounds the read a health check makes (etcd's request
// timeout with its default election timeout).
const healthTimeout = 7 * time.Second

// healthBody is /health's JSON, etcd's field names.
type healthBody struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
	// Warnings is zketcd's: what to fix that does not make the instance
	// unhealthy (etcd's clients ignore the field).
	Warnings []string `json:"warnings,omitempty"`
}

// onlyGet answers etcd's 405 to anything but GET and tells whether r may go on.
func onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}

// querySet is the non-empty values of a repeated query parameter.
func querySet(r *http.Request, name string) map[string]bool {
	set := map[string]bool{}
	for _, v := range r.URL.Query()[name] {
		if v != "" {
			set[v] = true
		}
	}
	return set
}

// alarmReason is /health's reason for an active alarm, as etcd words it.
func alarmReason(a pb.AlarmType) string {
	switch a {
	case pb.AlarmType_NOSPACE:
		return "ALARM NOSPACE"
	case pb.AlarmType_CORRUPT:
		return "ALARM CORRUPT"
	}
	return "ALARM UNKNOWN"
}

// health answers /health as etcd does: an active alarm not excluded with
// ?exclude=NAME, no leader (no ZooKeeper session or a view behind; skipped
// with ?serializable=true), or a failing read makes it 503 with the reason.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !onlyGet(w, r) {
		return
	}
	serializable := r.URL.Query().Get("serializable") == "true"
	h := s.checkHealth(r.Context(), querySet(r, "exclude"), serializable)
	if s.cfg.Warnings != nil {
		h.Warnings = s.cfg.Warnings()
	}
	d, _ := json.Marshal(h)
	if h.Health != "true" {
		s.lg.WithField("reason", h.Reason).Warn("/health is false")
		http.Error(w, string(d), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write(d)
}

func (s *Server) checkHealth(ctx context.Context, excluded map[string]bool, serializable bool) healthBody {
	alarms, err := s.alarms(ctx)
	if err != nil {
		return healthBody{Health: "false", Reason: fmt.Sprintf("RANGE ERROR:%s", err)}
	}
	for _, a := range alarms {
		if !excluded[a.Alarm.String()] {
			return healthBody{Health: "false", Reason: alarmReason(a.Alarm)}
		}
	}
	if !serializable && s.cfg.Leader() != nil {
		return healthBody{Health: "false", Reason: "RAFT NO LEADER"}
	}
	if err := s.read(ctx, serializable); err != nil {
		return healthBody{Health: "false", Reason: fmt.Sprintf("RANGE ERROR:%s", err)}
	}
	return healthBody{Health: "true"}
}

func (s *Server) alarms(ctx context.Context) ([]*pb.AlarmMember, error) {
	if s.cfg.Alarms == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	return s.cfg.Alarms(ctx)
}

func (s *Server) read(ctx context.Context, serializable bool) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	return s.cfg.Read(ctx, serializable)
}

// healthCheck is one named check of /livez or /readyz.
type healthCheck struct {
	name string
	run  func(context.Context) error
}

// livezChecks and readyzChecks are etcd's checks of /livez and /readyz.
func (s *Server) livezChecks() []healthCheck {
	return []healthCheck{{"serializable_read", func(ctx context.Context) error { return s.read(ctx, true) }}}
}

func (s *Server) readyzChecks() []healthCheck {
	return []healthCheck{
		{"data_corruption", s.alarmCheck(pb.AlarmType_CORRUPT)},
		{"serializable_read", func(ctx context.Context) error { return s.read(ctx, true) }},
		{"linearizable_read", func(ctx context.Context) error { return s.read(ctx, false) }},
		// A zketcd instance is never a learner.
		{"non_learner", func(context.Context) error { return nil }},
	}
}

func (s *Server) alarmCheck(t pb.AlarmType) func(context.Context) error {
	return func(ctx context.Context) error {
		alarms, err := s.alarms(ctx)
		if err != nil {
			return err
		}
		for _, a := range alarms {
			if a.Alarm == t {
				return fmt.Errorf("alarm activated: %s", t)
			}
		}
		return nil
	}
}

// handleChecks installs root (/livez, /readyz) and one path per check, with
// etcd's text bodies: "ok" (each check's line first with ?verbose), or 503
// and every check's line when one fails; ?exclude=NAME skips a check.
func (s *Server) handleChecks(mux *http.ServeMux, root string, checks []healthCheck) {
	mux.HandleFunc(root, func(w http.ResponseWriter, r *http.Request) {
		excluded := querySet(r, "exclude")
		var run []healthCheck
		for _, c := range checks {
			if !excluded[c.name] {
				run = append(run, c)
			}
		}
		s.writeChecks(w, r, run)
	})
	for _, c := range checks {
		mux.HandleFunc(root+"/"+c.name, func(w http.ResponseWriter, r *http.Request) {
			s.writeChecks(w, r, []healthCheck{c})
		})
	}
}

func (s *Server) writeChecks(w http.ResponseWriter, r *http.Request, checks []healthCheck) {
	if !onlyGet(w, r) {
		return
	}
	var out strings.Builder
	failed := false
	for _, c := range checks {
		if err := c.run(r.Context()); err != nil {
			fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
			failed = true
		} else {
			fmt.Fprintf(&out, "[+]%s ok\n", c.name)
		}
	}
	if failed {
		s.lg.WithFields(map[string]any{"path": r.URL.Path, "reason": out.String()}).Warn("health check failed")
		http.Error(w, out.String(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		fmt.Fprint(w, out.String())
	}
	fmt.Fprint(w, "ok\n")
}

// versions is /version's JSON: etcd's three fields, then zketcd's build.
// etcd reads /version with a json.Unmarshal into its version.Versions,
// which ignores fields it does not know; every value is a string, so a
// reader decoding the answer into a map of strings works as on etcd.
type versions struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
	Storage string `json:"storage"`
	// Zketcd and ZketcdCommit are buildinfo's Version and Commit.
	Zketcd       string `json:"zketcd"`
	ZketcdCommit string `json:"zketcd_commit"`
}

// serveVersion answers /version: the etcd API version zketcd implements,
// the cluster and storage versions etcd 3.7 reports, and the build.
func serveVersion(w http.ResponseWriter, r *http.Request) {
	if !onlyGet(w, r) {
		return
	}
	minor := version.Version[:strings.LastIndexByte(version.Version, '.')] + ".0"
	build := buildinfo.Get()
	w.Header().Set("Content-Type", "application/json")
	d, _ := json.Marshal(versions{Server: version.Version, Cluster: minor, Storage: minor, Zketcd: build.Version, ZketcdCommit: build.Commit})
	w.Write(d)
}

// HandleHealth installs /health, /livez and /readyz (and their checks) on
// mux, for a listener other than the client URLs (etcd's metrics URLs).
func (s *Server) HandleHealth(mux *http.ServeMux) {
	mux.HandleFunc("/health", s.health)
	s.handleChecks(mux, "/livez", s.livezChecks())
	s.handleChecks(mux, "/readyz", s.readyzChecks())
}
