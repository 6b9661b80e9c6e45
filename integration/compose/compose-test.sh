#!/usr/bin/env bash
# compose-test (make compose-test; not in CI): runs docker-compose.yml for
# real on this host and leaves the host as it found it.
#
#  1. Records the host's network settings a Docker daemon changes (iptables
#     and ip6tables rules and policies, links, forwarding and bridge
#     sysctls, netfilter modules).
#  2. Uses the Docker daemon that runs, or starts Debian's dockerd (docker.io)
#     with its host networking off (--iptables=false --ip-forward=false
#     --ip-masq=false --bridge=none: no FORWARD policy, NAT rule or docker0;
#     containers reach each other on the compose network's bridge and
#     published ports go through docker-proxy on 127.0.0.1).
#  3. Builds every image locally, nothing pulled: a Debian bookworm base with
#     Debian's zookeeper package (debootstrap from the host's apt mirror, then
#     `docker import`; cached in $CACHE/compose), a Go image (that base plus
#     this host's Go toolchain), zketcd from the Dockerfile on scratch (built
#     from a copy of the sources with vendor/: no network), ZooKeeper from
#     docker/zookeeper, kube-apiserver from the binary `make e2e` builds.
#  4. Checks the file with Compose v1 (docker-compose) and v2 (docker compose)
#     when installed, brings the stack up with v1 (else v2), waits for
#     kube-apiserver to be healthy, then checks /readyz, a create, a LIST and a
#     WATCH through kube-apiserver and a key through etcdctl over TLS.
#  5. Takes the stack down (volumes too), stops the daemon it started, undoes
#     what the daemon changed on the host and compares the settings with
#     step 1's: it fails if a difference is left.
#
# Needs root. CACHE is ${ZKETCD_CACHE:-$HOME/.cache/zketcd}. Output: a
# transcript on stdout (docs/kubernetes.md shows one).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${ZKETCD_CACHE:-${HOME:-/root}/.cache/zketcd}"
docker="${DOCKER:-/usr/bin/docker}" # Debian's docker.io client
project=zketcd-compose-test
start_time=$SECONDS

say() { printf '%s\n' "$*"; }
step() { printf '\n[%4ds] %s\n' "$((SECONDS - start_time))" "$*"; }
die() { say "compose-test: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it may start dockerd)"
for c in "$docker" dockerd curl jq openssl ip iptables; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found"
done

work="$(mktemp -d /tmp/zketcd-compose.XXXXXX)"
started_daemon=0
daemon_pid=""
stack_up=0

# --- host settings ---------------------------------------------------------

# host_state prints the settings a Docker daemon changes, one per line.
host_state() {
	local t k
	for t in filter nat mangle raw; do
		iptables -t "$t" -S 2>/dev/null | sed "s/^/iptables $t: /" || true
		ip6tables -t "$t" -S 2>/dev/null | sed "s/^/ip6tables $t: /" || true
	done
	# Legacy (x_tables) tables, named without loading any: listing one
	# with iptables-legacy would register it.
	for k in ip_tables_names ip6_tables_names; do
		[ -r "/proc/net/$k" ] || continue
		while read -r t; do
			echo "legacy $k: $t"
			case "$k" in
			ip_tables_names) iptables-legacy -t "$t" -S 2>/dev/null | sed "s/^/iptables-legacy $t: /" ;;
			ip6_tables_names) ip6tables-legacy -t "$t" -S 2>/dev/null | sed "s/^/ip6tables-legacy $t: /" ;;
			esac
		done < "/proc/net/$k"
	done
	ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link: " $2}' | sort
	for k in net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv6.conf.all.forwarding \
		net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.bridge.bridge-nf-call-arptables; do
		echo "sysctl: $k=$(sysctl -n "$k" 2>/dev/null || echo absent)"
	done
	if [ -r /proc/modules ]; then
		awk '{print "module: " $1}' /proc/modules | grep -E ': (br_netfilter|bridge|overlay|veth|xt_|nf_|ip_tables|ip6_tables|iptable_|ip6table_)' | sort
	else
		echo "module: (no /proc/modules: this kernel loads no modules)"
	fi
}

# docker_owned tells whether a state line is the Docker daemon's: its
# chains and rules, its bridges (docker0, br-<id>) and veths.
docker_owned() {
	grep -qE 'DOCKER|docker0|br-[0-9a-f]{12}|link: veth[0-9a-f]{7}$|link: docker0$|link: br-[0-9a-f]{12}$' <<<"$1"
}

# restore_host undoes what differs from before.state and is the daemon's:
# new links, rules and chains removed, policies and sysctls set back.
restore_host() {
	host_state > "$work/after.state"
	local line
	while IFS= read -r line; do
		case "$line" in
		"link: "*)
			docker_owned "$line" && ip link delete "${line#link: }" 2>/dev/null && say "  removed link ${line#link: }" ;;
		"iptables "* | "ip6tables "* | "iptables-legacy "* | "ip6tables-legacy "*)
			local cmd=${line%% *} rest=${line#* } table rule
			table=${rest%%: *}
			rule=${rest#*: }
			case "$rule" in
			"-A "*) docker_owned "$line" && $cmd -t "$table" -D ${rule#-A } 2>/dev/null && say "  removed $cmd -t $table $rule" ;;
			esac ;;
		esac
	done < <(comm -13 <(sort "$work/before.state") <(sort "$work/after.state"))
	# Chains the daemon made (after their rules), then policies and sysctls.
	while IFS= read -r line; do
		case "$line" in
		"iptables "*": -N "* | "ip6tables "*": -N "* | "iptables-legacy "*": -N "* | "ip6tables-legacy "*": -N "*)
			local cmd=${line%% *} rest=${line#* } table chain
			table=${rest%%: *}
			chain=${rest#*: -N }
			if docker_owned "$line"; then
				$cmd -t "$table" -F "$chain" 2>/dev/null
				$cmd -t "$table" -X "$chain" 2>/dev/null && say "  removed chain $cmd -t $table $chain"
			fi ;;
		esac
	done < <(comm -13 <(sort "$work/before.state") <(host_state | sort))
	while IFS= read -r line; do
		case "$line" in
		"iptables "*": -P "* | "ip6tables "*": -P "* | "iptables-legacy "*": -P "* | "ip6tables-legacy "*": -P "*)
			local cmd=${line%% *} rest=${line#* } table
			table=${rest%%: *}
			$cmd -t "$table" ${rest#*: } && say "  set back $cmd -t $table ${rest#*: }" ;;
		"sysctl: "*)
			local kv=${line#sysctl: }
			[ "${kv#*=}" = absent ] || { sysctl -qw "$kv" && say "  set back $kv"; } ;;
		esac
	done < <(comm -23 <(sort "$work/before.state") <(host_state | sort))
}

# --- cleanup ---------------------------------------------------------------

compose() { (cd "$work/src" && "${compose_cmd[@]}" -p "$project" "$@"); }

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	if [ "$stack_up" = 1 ]; then
		step "taking the stack down"
		compose down -v --remove-orphans > "$work/logs/down.log" 2>&1
		say "  removed $(grep -c '^Removing .*done' "$work/logs/down.log") containers, $(grep -c '^Removing network' "$work/logs/down.log") network, $(grep -c '^Removing volume' "$work/logs/down.log") volumes"
	fi
	if [ "$started_daemon" = 1 ]; then
		step "stopping the dockerd this run started (pid $daemon_pid)"
		kill -TERM "$daemon_pid" 2>/dev/null
		for _ in $(seq 1 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 1; done
		if kill -0 "$daemon_pid" 2>/dev/null; then
			say "  dockerd did not stop in 60 s: SIGKILL"
			kill -KILL "$daemon_pid"
		fi
		# Its containerd and shims end with it; none may be left.
		for _ in $(seq 1 20); do pgrep -f '/var/run/docker/containerd' >/dev/null || break; sleep 0.5; done
		if pgrep -af 'dockerd|/var/run/docker/containerd|containerd-shim' | grep -v pgrep; then
			say "  processes of the daemon are left (above)"
			rc=1
		else
			say "  dockerd and its containerd stopped"
		fi
		step "restoring the host's network settings"
		restore_host
		host_state > "$work/final.state"
		local diff
		diff="$(diff "$work/before.state" "$work/final.state" || true)"
		if [ -z "$diff" ]; then
			say "  host settings: identical to before the run ($(wc -l < "$work/before.state") settings compared)"
		else
			local ours=0
			while IFS= read -r line; do
				case "$line" in [\<\>]*) docker_owned "$line" && ours=1 ;; esac
			done <<<"$diff"
			say "  host settings differ from before the run:"
			printf '%s\n' "$diff" | sed 's/^/    /'
			if [ "$ours" = 1 ]; then
				say "  the daemon's changes are left: FAIL"
				rc=1
			else
				say "  none of them is the daemon's (other processes changed these meanwhile)"
			fi
		fi
	fi
	if [ "$rc" != 0 ] && [ -d "$work/logs" ]; then
		mkdir -p /tmp/zketcd-compose-logs && cp -r "$work/logs/." /tmp/zketcd-compose-logs/ 2>/dev/null
		say "compose-test: logs kept in /tmp/zketcd-compose-logs" >&2
	fi
	rm -rf "$work"
	[ "$rc" = 0 ] && step "compose-test: PASS" || say "compose-test: FAIL (exit $rc)" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the host before ----------------------------------------------------

step "recording the host's network settings"
host_state > "$work/before.state"
say "  $(grep -c '^iptables\|^ip6tables' "$work/before.state") iptables rules and policies, $(grep -c '^link' "$work/before.state") links, $(grep -c '^sysctl' "$work/before.state") sysctls; $(grep '^sysctl: net.ipv4.ip_forward' "$work/before.state" | cut -d' ' -f2); $(grep 'FORWARD' "$work/before.state" | grep -- '-P' | head -n 1 | cut -d' ' -f3-)"

for p in 2181 2379 2381 6443; do
	if ss -Hltn "sport = :$p" | grep -q .; then die "port $p is in use on this host (the stack publishes it on 127.0.0.1)"; fi
done

# --- 2. the daemon ---------------------------------------------------------

mkdir -p "$work/logs"
if "$docker" info >/dev/null 2>&1; then
	step "using the Docker daemon that runs: $("$docker" version --format '{{.Server.Version}}')"
else
	flags=(--iptables=false --ip-forward=false --ip-masq=false --bridge=none)
	step "starting Debian's dockerd $(dockerd --version | sed 's/^Docker version //') ${flags[*]}"
	dockerd "${flags[@]}" --log-level=warn > "$work/logs/dockerd.log" 2>&1 &
	daemon_pid=$!
	started_daemon=1
	for _ in $(seq 1 60); do "$docker" info >/dev/null 2>&1 && break; sleep 1; done
	"$docker" info >/dev/null 2>&1 || die "dockerd did not answer in 60 s: $(tail -n 5 "$work/logs/dockerd.log")"
	say "  serving: storage $("$docker" info --format '{{.Driver}}'), cgroup $("$docker" info --format '{{.CgroupDriver}}') v$("$docker" info --format '{{.CgroupVersion}}')"
fi

# --- 3. the images ---------------------------------------------------------

have_image() { "$docker" image inspect "$1" >/dev/null 2>&1; }

base=zketcd-compose/debian-zookeeper:bookworm
step "base image $base"
if have_image "$base"; then
	say "  present"
else
	tarball="$cache/compose/debian-bookworm-zookeeper.tar"
	if [ ! -s "$tarball" ]; then
		command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
		mirror="$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)"
		[ -n "$mirror" ] || mirror="$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
		[ -n "$mirror" ] || die "no Debian mirror in the host's apt sources"
		say "  debootstrap --variant=minbase --include=zookeeper bookworm (the host's apt mirror)"
		rootfs="$work/rootfs"
		debootstrap --variant=minbase --include=zookeeper bookworm "$rootfs" "$mirror" > "$work/logs/debootstrap.log" 2>&1 ||
			die "debootstrap failed: $(tail -n 5 "$work/logs/debootstrap.log")"
		rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
		mkdir -p "$(dirname "$tarball")"
		tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
		rm -rf "$rootfs"
	fi
	"$docker" import "$tarball" "$base" >/dev/null
	say "  imported from $tarball ($(du -h "$tarball" | cut -f1))"
fi

goversion="$(go env GOVERSION)"
goimage="zketcd-compose/golang:${goversion#go}"
step "Go image $goimage (the base and this host's $(go env GOROOT))"
if have_image "$goimage"; then
	say "  present"
else
	printf 'FROM %s\nCOPY . /usr/local/go\nENV PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin GOPATH=/go GOTOOLCHAIN=local\n' "$base" |
		"$docker" build -q -t "$goimage" -f - "$(go env GOROOT)" > /dev/null
	say "  built"
fi

kube="$("$repo/integration/kube/build-kube-apiserver.sh" 2>"$work/logs/kube-build.log" | tail -n 1)" ||
	die "building kube-apiserver failed: $(tail -n 5 "$work/logs/kube-build.log")"
kversion="$("$kube" --version | awk '{print $2}')"
kubeimage="zketcd-compose/kube-apiserver:$kversion"
step "kube-apiserver image $kubeimage (from $kube)"
mkdir -p "$work/kube"
cp "$kube" "$work/kube/kube-apiserver"
"$docker" build -q -t "$kubeimage" -f "$here/kube-apiserver.Dockerfile" "$work/kube" >/dev/null
rm -rf "$work/kube"
say "  built"

step "the sources, vendored (the image builds have no network)"
mkdir -p "$work/src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -xf - -C "$work/src"
(cd "$work/src" && GOFLAGS=-mod=mod GOPROXY=off go mod vendor) || die "go mod vendor failed"
say "  $(du -sh "$work/src/vendor" | cut -f1) of vendored modules"

export ZKETCD_GO_IMAGE="$goimage" ZKETCD_BASE_IMAGE=scratch ZOOKEEPER_BASE_IMAGE="$base" KUBE_APISERVER_IMAGE="$kubeimage"
export ZKETCD_VERSION="$(cd "$repo" && git describe --tags --always --dirty)" ZKETCD_COMMIT="$(cd "$repo" && git rev-parse HEAD)"
export DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}" COMPOSE_DOCKER_CLI_BUILD=0

# --- 4. the stack ----------------------------------------------------------

step "checking docker-compose.yml"
compose_cmd=()
if command -v docker-compose >/dev/null 2>&1; then
	v1="$(docker-compose version --short 2>/dev/null)"
	(cd "$work/src" && docker-compose -p "$project" config -q) || die "Compose v1 $v1 refuses docker-compose.yml"
	say "  Compose v1 $v1 (docker-compose): accepted"
	compose_cmd=(docker-compose)
else
	say "  Compose v1 (docker-compose): not installed"
fi
if "$docker" compose version >/dev/null 2>&1; then
	v2="$("$docker" compose version --short 2>/dev/null)"
	(cd "$work/src" && "$docker" compose -p "$project" config -q) || die "Compose v2 $v2 refuses docker-compose.yml"
	say "  Compose v2 $v2 (docker compose): accepted"
	[ ${#compose_cmd[@]} -gt 0 ] || compose_cmd=("$docker" compose)
else
	say "  Compose v2 (docker compose): not installed here (the compose tests of make test load the file with its loader)"
fi
[ ${#compose_cmd[@]} -gt 0 ] || die "neither docker-compose nor docker compose is installed"

step "building the images with ${compose_cmd[*]} build"
compose build > "$work/logs/build.log" 2>&1 || die "build failed: $(tail -n 20 "$work/logs/build.log")"
for img in zketcd:dev zketcd-zookeeper:3.8 "$kubeimage"; do
	say "  $img: $("$docker" image inspect --format '{{.Size}}' "$img" | awk '{printf "%.0f MB", $1 / 1e6}')"
done
say "  zketcd in its image: $("$docker" run --rm --entrypoint /usr/local/bin/zketcd zketcd:dev version 2>/dev/null | head -n 2 | tr '\n' ' ')"

step "${compose_cmd[*]} up -d"
stack_up=1
up_start=$SECONDS
compose up -d > "$work/logs/up.log" 2>&1 || die "up failed: $(tail -n 20 "$work/logs/up.log")"
api="$(compose ps -q kube-apiserver)"
for _ in $(seq 1 120); do
	status="$("$docker" inspect --format '{{.State.Health.Status}}' "$api" 2>/dev/null || true)"
	[ "$status" = healthy ] && break
	for one in kube-init kube-auth; do
		id="$(compose ps -q "$one")"
		code="$("$docker" inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$id" 2>/dev/null || true)"
		case "$code" in "exited 0" | "" | running* | created*) ;; *) compose logs "$one" | tail -n 20; die "$one: $code" ;; esac
	done
	sleep 2
done
[ "$status" = healthy ] || { compose logs --tail 30 > "$work/logs/compose.log" 2>&1; die "kube-apiserver not healthy after 240 s ($status)"; }
say "  kube-apiserver healthy $((SECONDS - up_start)) s after up"
compose ps 2>/dev/null | sed 's/^/  /'
say "  kube-init: $(compose logs --no-color kube-init 2>/dev/null | grep -o 'credentials in [^;]*' | head -n 1)"
say "  kube-auth: $(compose logs --no-color kube-auth 2>/dev/null | grep -o 'authentication on.*' | head -n 1)"

creds="$work/src/kube-credentials"
token="$(cat "$creds/token")"
k() { curl -sS --fail-with-body -k -H "Authorization: Bearer $token" "$@"; }
base_url=https://127.0.0.1:6443

step "checks through kube-apiserver ($base_url) and etcdctl (https://127.0.0.1:2379)"
readyz="$(curl -sS -k "$base_url/readyz?verbose")"
grep -q '^readyz check passed' <<<"$readyz" || die "/readyz: $readyz"
say "  GET /readyz?verbose: $(grep -c '^\[+\]' <<<"$readyz") checks ok, $(grep -E '^\[\+\]etcd' <<<"$readyz" | tr '\n' ' ')"

ns=compose-test
k -X POST -H 'Content-Type: application/json' "$base_url/api/v1/namespaces" \
	-d "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}" > "$work/ns.json"
say "  POST namespace $ns: resourceVersion $(jq -r .metadata.resourceVersion "$work/ns.json")"
k -X POST -H 'Content-Type: application/json' "$base_url/api/v1/namespaces/$ns/configmaps" \
	-d '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"first"},"data":{"a":"1"}}' > "$work/cm.json"
say "  POST configmap $ns/first: resourceVersion $(jq -r .metadata.resourceVersion "$work/cm.json")"
k "$base_url/api/v1/namespaces/$ns/configmaps" > "$work/list.json"
listrv="$(jq -r .metadata.resourceVersion "$work/list.json")"
[ "$(jq '.items | length' "$work/list.json")" = 1 ] || die "LIST: $(cat "$work/list.json")"
say "  LIST configmaps in $ns: $(jq -r '[.items[].metadata.name] | join(",")' "$work/list.json") at resourceVersion $listrv"

k -N --max-time 20 "$base_url/api/v1/namespaces/$ns/configmaps?watch=1&resourceVersion=$listrv" > "$work/watch.json" 2>/dev/null &
watch_pid=$!
sleep 1
k -X POST -H 'Content-Type: application/json' "$base_url/api/v1/namespaces/$ns/configmaps" \
	-d '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"second"},"data":{"b":"2"}}' > /dev/null
k -X PATCH -H 'Content-Type: application/merge-patch+json' "$base_url/api/v1/namespaces/$ns/configmaps/second" -d '{"data":{"b":"3"}}' > /dev/null
k -X DELETE "$base_url/api/v1/namespaces/$ns/configmaps/second" > /dev/null
for _ in $(seq 1 40); do
	[ "$(jq -s 'length' "$work/watch.json" 2>/dev/null || echo 0)" -ge 3 ] && break
	sleep 0.25
done
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
events="$(jq -r '"\(.type) \(.object.metadata.name) at \(.object.metadata.resourceVersion)"' "$work/watch.json" | paste -sd, | sed 's/,/, /g')"
[ "$(jq -r '.type' "$work/watch.json" | tr '\n' ' ')" = "ADDED MODIFIED DELETED " ] || die "WATCH from $listrv: $events"
say "  WATCH from $listrv while creating, patching and deleting $ns/second: $events"

etcdctl="$("$repo/integration/bench/build-peers.sh" etcdctl 2>>"$work/logs/peers.log" | sed -n 's/^etcdctl=//p')"
[ -x "$etcdctl" ] || die "no etcdctl: $(tail -n 5 "$work/logs/peers.log")"
ctl=("$etcdctl" --endpoints https://127.0.0.1:2379 --cacert "$creds/ca.crt" --cert "$creds/root.crt" --key "$creds/root.key")
got="$("${ctl[@]}" get "/registry/configmaps/$ns/first" --keys-only)"
[ "$got" = "/registry/configmaps/$ns/first" ] || die "etcdctl get /registry/configmaps/$ns/first: $got"
say "  etcdctl get /registry/configmaps/$ns/first --keys-only (root's certificate): $got"
"${ctl[@]}" put /compose-test/key "written by etcdctl" > /dev/null
say "  etcdctl put /compose-test/key, get: $("${ctl[@]}" get /compose-test/key --print-value-only)"
say "  etcdctl auth status: $("${ctl[@]}" auth status | tr '\n' ' ')"
if "$etcdctl" --endpoints https://127.0.0.1:2379 --cacert "$creds/ca.crt" --command-timeout 3s get /compose-test/key > "$work/anon.out" 2>&1; then
	die "etcdctl without a client certificate was served"
fi
say "  etcdctl without a client certificate: refused ($(tail -n 1 "$work/anon.out" | cut -c1-80))"
