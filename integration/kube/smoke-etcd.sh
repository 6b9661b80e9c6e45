#!/usr/bin/env bash
# Smoke test: runs kube-apiserver against an etcd v3 API endpoint (real etcd or
# zketcd) and exercises it with curl.
#
# Usage: smoke-etcd.sh ETCD_ENDPOINT [KUBE_APISERVER_BINARY]
#   ETCD_ENDPOINT          e.g. http://127.0.0.1:2379 (passed to --etcd-servers;
#                          a comma-separated list works too)
#   KUBE_APISERVER_BINARY  default: $KUBE_APISERVER, else the output of
#                          ./build-kube-apiserver.sh (cached after the first build)
#
# It starts kube-apiserver on 127.0.0.1 (a free port, or $SECURE_PORT) with a
# static bearer token in system:masters, waits up to $READY_TIMEOUT seconds
# (default 180) for /readyz, prints the time to ready and `readyz?verbose`,
# creates a namespace and a configmap, lists them, prints their
# resourceVersions, then stops kube-apiserver and removes its temp dir (on any
# exit, including failures and Ctrl-C). It does not start or stop etcd.
#
# Each run uses its own key prefix in etcd ($ETCD_PREFIX, default
# /kube-smoke-<time>-<pid>/registry), so kube-apiserver bootstraps a fresh
# cluster state every time and runs never collide. KEEP_TMP=1 keeps the temp
# dir (certs, kube-apiserver.log) for inspection; KUBE_APISERVER_EXTRA_ARGS adds
# flags. Exit status 0 = all passed.
set -euo pipefail

log() { echo "smoke: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
fi
ETCD_ENDPOINT="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APISERVER="${2:-${KUBE_APISERVER:-}}"
if [ -z "$APISERVER" ]; then
	APISERVER="$("$here/build-kube-apiserver.sh" | tail -n 1)"
fi
[ -x "$APISERVER" ] || die "kube-apiserver binary not executable: $APISERVER"
for tool in curl openssl; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done
READY_TIMEOUT="${READY_TIMEOUT:-180}"
ETCD_PREFIX="${ETCD_PREFIX:-/kube-smoke-$(date +%s)-$$/registry}"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 20000))
		port_in_use "$p" || { echo "$p"; return 0; }
	done
	return 1
}
SECURE_PORT="${SECURE_PORT:-$(free_port)}" || die "no free port found"
port_in_use "$SECURE_PORT" && die "port $SECURE_PORT is already in use"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kube-smoke.XXXXXX")"
apiserver_pid=""
cleanup() {
	local rc=$?
	if [ -n "$apiserver_pid" ] && kill -0 "$apiserver_pid" 2>/dev/null; then
		log "stopping kube-apiserver (pid $apiserver_pid)"
		kill -TERM "$apiserver_pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$apiserver_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$apiserver_pid" 2>/dev/null; then
			log "kube-apiserver did not exit in 10s, killing it"
			kill -KILL "$apiserver_pid" 2>/dev/null || true
		fi
		wait "$apiserver_pid" 2>/dev/null || true
	fi
	if [ "$rc" -ne 0 ] && [ -f "$tmp/kube-apiserver.log" ]; then
		log "last lines of kube-apiserver.log:"
		tail -n 40 "$tmp/kube-apiserver.log" >&2 || true
	fi
	if [ "${KEEP_TMP:-0}" = 1 ]; then
		log "kept $tmp"
	else
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "kube-apiserver: $APISERVER ($("$APISERVER" --version))"
log "etcd: $ETCD_ENDPOINT prefix $ETCD_PREFIX; secure port 127.0.0.1:$SECURE_PORT; temp dir $tmp"

openssl genrsa -out "$tmp/sa.key" 2048 2>/dev/null
openssl rsa -in "$tmp/sa.key" -pubout -out "$tmp/sa.pub" 2>/dev/null
TOKEN="$(openssl rand -hex 24)"
echo "$TOKEN,admin,admin-uid,system:masters" >"$tmp/tokens.csv"
mkdir -p "$tmp/certs"

# KUBE_APISERVER_EXTRA_ARGS: more flags, split on whitespace (e.g. "-v=4").
read -r -a extra_args <<<"${KUBE_APISERVER_EXTRA_ARGS:-}"

start_ns=$(date +%s%N)
"$APISERVER" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$SECURE_PORT" \
	--cert-dir="$tmp/certs" \
	--etcd-servers="$ETCD_ENDPOINT" --etcd-prefix="$ETCD_PREFIX" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$tmp/sa.pub" --service-account-signing-key-file="$tmp/sa.key" \
	--token-auth-file="$tmp/tokens.csv" --authorization-mode=RBAC \
	--service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
	"${extra_args[@]}" \
	>"$tmp/kube-apiserver.log" 2>&1 </dev/null &
apiserver_pid=$!

base="https://127.0.0.1:$SECURE_PORT"
# api METHOD PATH [JSON-BODY]: prints the body; the HTTP status goes to $tmp/status.
api() {
	# A non-curl User-Agent: kube-apiserver pretty-prints JSON for curl/wget,
	# the checks below expect its compact encoding.
	local args=(-sS -k --max-time 30 -A zketcd-smoke/1 -H "Authorization: Bearer $TOKEN" -X "$1" -o "$tmp/body" -w '%{http_code}')
	[ $# -lt 3 ] || args+=(-H 'Content-Type: application/json' --data-binary "$3")
	curl "${args[@]}" "$base$2" >"$tmp/status" || echo 000 >"$tmp/status"
	cat "$tmp/body" 2>/dev/null || true
	rm -f "$tmp/body"
}
status() { cat "$tmp/status"; }
elapsed() { local now; now=$(date +%s%N); printf '%d.%03d' $(((now - start_ns) / 1000000000)) $((((now - start_ns) / 1000000) % 1000)); }

log "waiting up to ${READY_TIMEOUT}s for /readyz"
deadline=$((SECONDS + READY_TIMEOUT))
last=""
while :; do
	kill -0 "$apiserver_pid" 2>/dev/null || { wait "$apiserver_pid" && rc=0 || rc=$?; apiserver_pid=""; die "kube-apiserver exited early (status $rc)"; }
	last="$(api GET /readyz 2>/dev/null || true)"
	[ "$(status)" = 200 ] && break
	[ "$SECONDS" -lt "$deadline" ] || {
		log "last /readyz?verbose:"
		api GET '/readyz?verbose' >&2 || true
		die "not ready after ${READY_TIMEOUT}s (last status $(status): $last)"
	}
	sleep 0.2
done
echo "time to ready: $(elapsed)s"
echo "--- /readyz?verbose"
api GET '/readyz?verbose'
[ "$(status)" = 200 ] || die "readyz?verbose returned $(status)"

# Pretty-print name/resourceVersion pairs from a JSON object or list.
# jq when available; otherwise a grep over kube-apiserver's compact JSON,
# whose metadata is serialized in the fixed order name, namespace, uid,
# resourceVersion.
rvs() {
	if command -v jq >/dev/null 2>&1 && [ "${SMOKE_NO_JQ:-0}" != 1 ]; then
		jq -r 'if .items then "  list resourceVersion=\(.metadata.resourceVersion) (\(.items | length) items)", (.items[] | "    \(.metadata.namespace // "-")/\(.metadata.name) resourceVersion=\(.metadata.resourceVersion)")
			else "  \(.kind) \(.metadata.namespace // "-")/\(.metadata.name) resourceVersion=\(.metadata.resourceVersion)" end'
	else
		local body; body="$(cat)"
		case "$body" in
		*'"items":'*)
			printf '  list resourceVersion=%s\n' "$(printf '%s' "$body" | grep -oE '^\{"kind":"[A-Za-z]+List","apiVersion":"[^"]*","metadata":\{"resourceVersion":"[0-9]+"' | grep -oE '[0-9]+"$' | tr -d '"' || true)"
			printf '%s' "$body" | grep -oE '"metadata":\{"name":"[^"]*"(,"namespace":"[^"]*")?,"uid":"[^"]*","resourceVersion":"[0-9]+"' |
				sed -E 's/.*"name":"([^"]*)"(,"namespace":"([^"]*)")?.*"resourceVersion":"([0-9]+)"/    \3\/\1 resourceVersion=\4/; s/^    \//    -\//' || true
			;;
		*)
			printf '%s' "$body" | grep -oE '^\{"kind":"[A-Za-z]+"' | head -n 1 | sed -E 's/.*"([A-Za-z]+)"$/  \1/' | tr -d '\n' || true
			printf '%s' "$body" | grep -oE '"metadata":\{"name":"[^"]*"(,"namespace":"[^"]*")?,"uid":"[^"]*","resourceVersion":"[0-9]+"' | head -n 1 |
				sed -E 's/.*"name":"([^"]*)"(,"namespace":"([^"]*)")?.*"resourceVersion":"([0-9]+)"/ \3\/\1 resourceVersion=\4/; s/^ \// -\//' || true
			;;
		esac
	fi
}

ns="smoke-$(date +%s)"
echo "--- create namespace $ns"
out="$(api POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}")"
[ "$(status)" = 201 ] || die "create namespace: HTTP $(status): $out"
printf '%s' "$out" | rvs

echo "--- create configmap $ns/smoke-cm"
out="$(api POST "/api/v1/namespaces/$ns/configmaps" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"smoke-cm"},"data":{"hello":"world"}}')"
[ "$(status)" = 201 ] || die "create configmap: HTTP $(status): $out"
printf '%s' "$out" | rvs

echo "--- get configmap $ns/smoke-cm"
out="$(api GET "/api/v1/namespaces/$ns/configmaps/smoke-cm")"
[ "$(status)" = 200 ] || die "get configmap: HTTP $(status): $out"
case "$out" in *'"data":{"hello":"world"}'*) ;; *) die "configmap data mismatch: $out" ;; esac
printf '%s' "$out" | rvs

echo "--- list namespaces"
out="$(api GET /api/v1/namespaces)"
[ "$(status)" = 200 ] || die "list namespaces: HTTP $(status): $out"
case "$out" in *"\"name\":\"$ns\""*) ;; *) die "namespace $ns missing from list" ;; esac
printf '%s' "$out" | rvs

echo "--- list configmaps in $ns"
out="$(api GET "/api/v1/namespaces/$ns/configmaps")"
[ "$(status)" = 200 ] || die "list configmaps: HTTP $(status): $out"
case "$out" in *'"name":"smoke-cm"'*) ;; *) die "configmap smoke-cm missing from list" ;; esac
printf '%s' "$out" | rvs

echo "smoke: PASS ($(elapsed)s after kube-apiserver start)"
