package diff

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultStepTimeout bounds a single step when Runner.StepTimeout is zero.
const DefaultStepTimeout = 30 * time.Second

// Runner plays scenarios against two targets and compares the results.
type Runner struct {
	// A is the reference target, normally EtcdFactory(). Lazy steps are built
	// from A's results and Expect assertions are checked against A.
	A Factory
	// B is the target under test.
	B Factory
	// Sequential disables t.Parallel for the scenario subtests.
	Sequential bool
	// KeepGoing reports every differing step of a scenario instead of
	// stopping the scenario at the first difference.
	KeepGoing bool
	// MergeStreamChunks compares RangeStream results after merging their
	// chunks into one RangeResponse (keys concatenated; header, count and
	// more taken from the last chunk) instead of chunk by chunk. Use it for
	// a target whose chunk boundaries legitimately differ from etcd's.
	MergeStreamChunks bool
	// StepTimeout bounds each step; zero means DefaultStepTimeout.
	StepTimeout time.Duration
}

// Run plays every scenario against a and b with the default Runner options.
func Run(t *testing.T, scenarios []Scenario, a, b Factory) {
	t.Helper()
	Runner{A: a, B: b}.Run(t, scenarios)
}

// Run plays every scenario in its own subtest. Each scenario gets a fresh
// target from both factories, so absolute revisions are comparable.
func (r Runner) Run(t *testing.T, scenarios []Scenario) {
	t.Helper()
	seen := make(map[string]bool, len(scenarios))
	for _, sc := range scenarios {
		if seen[sc.Name] {
			t.Errorf("duplicate scenario name %q", sc.Name)
			continue
		}
		seen[sc.Name] = true
		t.Run(sc.Name, func(t *testing.T) {
			if !r.Sequential {
				t.Parallel()
			}
			r.runScenario(t, sc)
		})
	}
}

func (r Runner) runScenario(t *testing.T, sc Scenario) {
	ta, tb := r.A(t), r.B(t)
	for _, p := range r.play(sc, ta, tb, ta.Client(t), tb.Client(t)) {
		t.Error(p)
	}
}

// play runs the steps of sc on both targets and returns the problems found:
// failed expectations and differences. It stops at the first difference
// unless r.KeepGoing is set, and at a step that cannot be built.
func (r Runner) play(sc Scenario, ta, tb Target, ca, cb *clientv3.Client) []string {
	ea, eb := newEndpoint(ca), newEndpoint(cb)
	defer ea.closeWatches()
	defer eb.closeWatches()
	timeout := r.StepTimeout
	if timeout == 0 {
		timeout = DefaultStepTimeout
	}

	var problems []string
	state := &State{}
	var history []string
	for i, raw := range sc.Steps {
		st, err := resolveStep(raw, state)
		if err != nil {
			return append(problems, fmt.Sprintf("step %d: building lazy step: %v", i, err))
		}
		if st.exec == nil {
			return append(problems, fmt.Sprintf("step %d: empty Step (use the constructors)", i))
		}

		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		ra := st.exec(ctx, ea)
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
		rb := st.exec(ctx, eb)
		cancel()

		title := stepTitle(i, st)
		history = append(history, fmt.Sprintf("%s: %s", title, oneLine(ra.Request)))

		for _, check := range st.checks {
			if err := check(state, ra); err != nil {
				problems = append(problems, fmt.Sprintf("%s: scenario expectation failed on %s: %v\nrequest: %s\n%s:\n%s",
					title, ta.Name(), err, oneLine(ra.Request), ta.Name(), indent(formatResult(ra))))
			}
		}
		state.add(st.label, ra)

		if d := r.compare(ra, rb, ta.Name(), tb.Name()); d != "" {
			problems = append(problems, fmt.Sprintf("%s: %s and %s differ\n\nrequest:\n%s\n%s:\n%s\n%s:\n%s\ndiff (-%s +%s):\n%s\nsteps so far:\n  %s",
				title, ta.Name(), tb.Name(),
				indent(multiLine(ra.Request)),
				ta.Name(), indent(formatResult(ra)),
				tb.Name(), indent(formatResult(rb)),
				ta.Name(), tb.Name(), d,
				strings.Join(history, "\n  ")))
			if !r.KeepGoing {
				return problems
			}
		}
	}
	return problems
}

// resolveStep builds a lazy step, turning a panic in the builder (such as
// State.Rev on a missing label) into an error.
func resolveStep(st Step, s *State) (out Step, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return st.resolve(s), nil
}

func stepTitle(i int, st Step) string {
	if st.label != "" {
		return fmt.Sprintf("step %d %s (%q)", i, st.kind, st.label)
	}
	return fmt.Sprintf("step %d %s", i, st.kind)
}

// compare returns a human-readable description of the differences between
// two results after normalisation, or "" if they match.
func (r Runner) compare(a, b Result, nameA, nameB string) string {
	var out []string
	ea, eb := errorInfoOf(a.Err), errorInfoOf(b.Err)
	if ea != eb {
		out = append(out, fmt.Sprintf("error: %s=%v, %s=%v", nameA, ea, nameB, eb))
	}
	ma, mb := Normalize(a.Responses), Normalize(b.Responses)
	if r.MergeStreamChunks {
		ma, mb = mergeChunks(ma), mergeChunks(mb)
	}
	if !equalMsgs(ma, mb) {
		if d := gocmp.Diff(abbreviate(ma), abbreviate(mb), protocmp.Transform()); d != "" {
			out = append(out, d)
		} else {
			out = append(out, "responses differ (no field-level diff available)")
		}
	}
	return strings.Join(out, "\n")
}

// Normalize returns deep copies of msgs with the response header fields that
// legitimately differ between two servers zeroed: cluster_id, member_id and
// raft_term of each response's top-level header (including the header inside
// a RangeStreamResponse). Headers nested in Txn responses are left alone:
// etcd fills only the revision there.
func Normalize(msgs []proto.Message) []proto.Message {
	out := make([]proto.Message, len(msgs))
	for i, m := range msgs {
		c := proto.Clone(m)
		if h := headerOf(c); h != nil {
			h.ClusterId, h.MemberId, h.RaftTerm = 0, 0, 0
		}
		out[i] = c
	}
	return out
}

// equalMsgs reports whether two response lists are equal. proto.Equal is
// much faster than cmp on large byte fields, so cmp only runs on a mismatch.
func equalMsgs(a, b []proto.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// mergeChunks folds a sequence of RangeResponse or RangeStreamResponse
// chunks into a single RangeResponse. Other messages pass through.
func mergeChunks(msgs []proto.Message) []proto.Message {
	if len(msgs) == 0 {
		return msgs
	}
	merged := &pb.RangeResponse{}
	for _, m := range msgs {
		var rr *pb.RangeResponse
		switch v := m.(type) {
		case *pb.RangeResponse:
			rr = v
		case *pb.RangeStreamResponse:
			rr = v.GetRangeResponse()
		default:
			return msgs
		}
		merged.Kvs = append(merged.Kvs, rr.GetKvs()...)
		if rr.GetHeader() != nil {
			merged.Header = rr.GetHeader()
		}
		merged.More = rr.GetMore()
		merged.Count = rr.GetCount()
	}
	return []proto.Message{merged}
}

// maxFormatted caps how much of a result is printed in a report.
const maxFormatted = 6000

func formatResult(r Result) string {
	var b strings.Builder
	for i, m := range abbreviate(Normalize(r.Responses)) {
		if len(r.Responses) > 1 {
			fmt.Fprintf(&b, "[chunk %d] ", i)
		}
		b.WriteString(multiLine(m))
		b.WriteByte('\n')
	}
	if r.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", errorInfoOf(r.Err))
	}
	if len(r.Responses) == 0 && r.Err == nil {
		b.WriteString("(no response)\n")
	}
	return truncate(b.String())
}

// maxBytesShown is the longest bytes field shown verbatim in reports.
const maxBytesShown = 256

// abbreviate returns copies of msgs in which every bytes field longer than
// maxBytesShown is replaced by its length, a digest and its first bytes, so
// that reports and diffs of large values stay readable and fast.
func abbreviate(msgs []proto.Message) []proto.Message {
	out := make([]proto.Message, len(msgs))
	for i, m := range msgs {
		c := proto.Clone(m)
		abbreviateMsg(c.ProtoReflect())
		out[i] = c
	}
	return out
}

func abbreviateMsg(m protoreflect.Message) {
	// Collect the replacements first: a message must not be mutated while
	// Range iterates over it.
	type set struct {
		fd protoreflect.FieldDescriptor
		v  protoreflect.Value
	}
	var sets []set
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				abbreviateMsg(l.Get(i).Message())
			}
		case fd.IsMap():
			// etcd responses have no maps.
		case fd.Message() != nil:
			abbreviateMsg(v.Message())
		case fd.Kind() == protoreflect.BytesKind && !fd.IsList():
			if b := v.Bytes(); len(b) > maxBytesShown {
				sum := sha256.Sum256(b)
				short := fmt.Sprintf("<%d bytes, sha256 %x, starting %q>", len(b), sum[:8], b[:32])
				sets = append(sets, set{fd, protoreflect.ValueOfBytes([]byte(short))})
			}
		}
		return true
	})
	for _, s := range sets {
		m.Set(s.fd, s.v)
	}
}

func multiLine(m proto.Message) string {
	if m == nil {
		return "(not sent)"
	}
	s := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Format(m)
	if s == "" {
		s = "{}"
	}
	return fmt.Sprintf("%s {\n%s}", m.ProtoReflect().Descriptor().Name(), indent(s))
}

func oneLine(m proto.Message) string {
	if m == nil {
		return "(not sent)"
	}
	s := fmt.Sprintf("%s{%s}", m.ProtoReflect().Descriptor().Name(), prototext.MarshalOptions{}.Format(m))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func truncate(s string) string {
	if len(s) <= maxFormatted {
		return s
	}
	return s[:maxFormatted] + fmt.Sprintf("\n… (%d more bytes)\n", len(s)-maxFormatted)
}
