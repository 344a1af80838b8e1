#!/usr/bin/env bash
# Local Kubernetes control plane for tests and the demo, without Docker.
#
#   hack/control-plane.sh build          build etcd, kwok, the JobSet controller, kube-apiserver,
#                                        kube-controller-manager and the kubelet into the cache (once
#                                        per version)
#   hack/control-plane.sh build-kubelet  build only the kubelet (real nodes: hack/real-node.sh)
#   hack/control-plane.sh paths          print the cached binary paths (KEY=PATH lines)
#   hack/control-plane.sh start DIR      certs + tokens, etcd, kube-apiserver, kube-controller-manager (garbage
#                                        collector, namespace, resource quota, ServiceAccount and ClusterRole
#                                        aggregation, Job controllers),
#                                        kwok on loopback; kubeconfigs in DIR. Real nodes (a kubelet
#                                        and containerd each) join with hack/real-node.sh start DIR ...
#   hack/control-plane.sh stop DIR       kill exactly the PIDs recorded in DIR, then remove DIR
#   hack/control-plane.sh env DIR        print `export KUBECONFIG=DIR/admin.kubeconfig` (and PATH with the cached tools)
#   hack/control-plane.sh restart COMPONENT DIR [--down SECONDS] [--kill]   (or DIR COMPONENT)
#                                        stop one of etcd, kube-apiserver, kube-controller-manager
#                                        (SIGTERM, or SIGKILL with --kill), stay down SECONDS (default
#                                        0), start it again with the same command line and wait until
#                                        it serves (fault injection for tests)
#   hack/control-plane.sh stop-component COMPONENT DIR [--kill]   stop one component, keep its
#                                        command line in DIR/COMPONENT.cmdline
#   hack/control-plane.sh start-component COMPONENT DIR           start it again from that file
#   hack/control-plane.sh build-jobset   build only the JobSet controller (sigs.k8s.io/jobset) and copy its CRD
#   hack/control-plane.sh start-jobset DIR   run the JobSet controller against DIR's control plane: its
#                                        CRD, the controller (admin kubeconfig) and its webhooks, which
#                                        the API server calls on loopback (see cmd_start_jobset)
#   hack/control-plane.sh stop-jobset DIR    remove its webhook configurations, stop it (the CRD stays)
#   hack/control-plane.sh watch DIR PID  (internal) stop DIR's control plane once process PID is gone;
#                                        `start` runs it when WALRAS_OWNER_PID is set
#
# Environment: WALRAS_CACHE, WALRAS_GO_PARALLEL (default 2), WALRAS_K8S_VERSION / _ETCD_ / _KWOK_ /
# _JOBSET_ (pins), WALRAS_OWNER_PID, WALRAS_APISERVER_READY_TIMEOUT (s, default 60),
# WALRAS_APISERVER_VERBOSITY (default 1), WALRAS_FAILED_LOGS_DIR (where a failed start copies logs),
# WALRAS_REAL_NODES=1 (the controllers real nodes need, see cmd_start),
# WALRAS_NODE_MONITOR_GRACE_PERIOD (with real nodes: how long a silent node stays Ready, default 50s).
#
# Called by walras.testing.devcluster (the pytest fixtures in tests/conftest.py use that), by `make`
# and by .ci/run.
#
# Binaries are built from the Go module proxy and cached under
# ${WALRAS_CACHE:-$HOME/.cache/walras}/<component>-<version>/bin, so a warm machine rebuilds nothing.
# `go install k8s.io/kubernetes/cmd/kube-apiserver@...` cannot work: k8s.io/kubernetes's go.mod
# requires its staging modules at v0.0.0 and points them at ./staging with `replace`, which Go
# ignores outside the main module. We therefore build inside a small wrapper module that requires
# k8s.io/kubernetes and maps every staging module (read from the downloaded upstream go.mod) to
# its published v0.<minor>.<patch> release.
set -o errexit -o nounset -o pipefail

K8S_VERSION="${WALRAS_K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${WALRAS_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${WALRAS_KWOK_VERSION:-v0.8.0}"
JOBSET_VERSION="${WALRAS_JOBSET_VERSION:-v0.10.1}"
CACHE="${WALRAS_CACHE:-$HOME/.cache/walras}"
# Other engineers share this machine's cores: build two packages at a time unless told otherwise.
GO_PARALLEL="${WALRAS_GO_PARALLEL:-2}"
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/kubeconfig.sh
source "$HACK_DIR/lib/kubeconfig.sh"
# shellcheck source=hack/lib/pki.sh
source "$HACK_DIR/lib/pki.sh"

APISERVER_BIN="$CACHE/kube-apiserver-$K8S_VERSION/bin/kube-apiserver"
KCM_BIN="$CACHE/kube-controller-manager-$K8S_VERSION/bin/kube-controller-manager"
ETCD_BIN="$CACHE/etcd-$ETCD_VERSION/bin/etcd"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION/bin/kwok"
KUBELET_BIN="$CACHE/kubelet-$K8S_VERSION/bin/kubelet"
JOBSET_BIN="$CACHE/jobset-$JOBSET_VERSION/bin/jobset-controller"
JOBSET_CRD="$CACHE/jobset-$JOBSET_VERSION/crds/jobset.x-k8s.io_jobsets.yaml"

log() { printf '[control-plane %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------

# Staging version for a Kubernetes version: v1.36.3 -> v0.36.3.
staging_version() { printf 'v0.%s\n' "${1#v1.}"; }

# Build one k8s.io/kubernetes command (kube-apiserver, kube-controller-manager) into
# $CACHE/<name>-$K8S_VERSION/bin/<name>, through a wrapper module (see the header). The Go build
# cache is shared, so the second component reuses most packages the first one compiled.
build_k8s_command() {
	local name="$1" bin="$2"
	if [[ -x "$bin" ]]; then
		log "$name $K8S_VERSION already built: $bin"
		return 0
	fi
	local root="$CACHE/$name-$K8S_VERSION"
	local src="$root/src"
	local staging
	staging="$(staging_version "$K8S_VERSION")"
	mkdir -p "$src" "$root/bin"
	log "$name $K8S_VERSION: downloading k8s.io/kubernetes's go.mod"
	local upstream_mod
	upstream_mod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
	[[ -f "$upstream_mod" ]] || die "could not download go.mod of k8s.io/kubernetes@$K8S_VERSION"
	local modules
	modules="$(sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/.*$|\1|p' "$upstream_mod" | sort -u)"
	local count
	count="$(printf '%s\n' "$modules" | grep -c .)"
	[[ "$count" -gt 0 ]] || die "no staging replace lines found in $upstream_mod"
	log "$name: mapping $count staging modules to $staging"
	{
		printf 'module walras.dev/build/%s\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$name" "$K8S_VERSION"
		local m
		for m in $modules; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
		printf ')\n'
	} >"$src/go.mod"
	rm -f "$src/go.sum"
	local pkg=k8s.io/component-base/version
	local cpkg=k8s.io/client-go/pkg/version
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	local date
	date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	local ldflags="-s -w"
	local p
	for p in "$pkg" "$cpkg"; do
		ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
	done
	log "$name: resolving modules (go get)"
	(cd "$src" && go get "k8s.io/kubernetes/cmd/$name@$K8S_VERSION")
	log "$name: go build -p $GO_PARALLEL (15-25 min cold on 2 cores; minutes after another component)"
	local start=$SECONDS
	(cd "$src" && CGO_ENABLED=0 go build -p "$GO_PARALLEL" -trimpath -ldflags "$ldflags" \
		-o "$root/bin/$name.tmp" "k8s.io/kubernetes/cmd/$name")
	mv "$root/bin/$name.tmp" "$bin"
	log "$name built in $((SECONDS - start)) s: $("$bin" --version)"
}

build_apiserver() { build_k8s_command kube-apiserver "$APISERVER_BIN"; }

# kube-controller-manager: the garbage collector (ownerReferences cascade) and the namespace
# controller (a deleted namespace is emptied and removed) are real in tests.
build_controller_manager() { build_k8s_command kube-controller-manager "$KCM_BIN"; }

# kubelet: for real nodes (hack/real-node.sh), built last so that it reuses the packages the
# other two compiled.
build_kubelet() { build_k8s_command kubelet "$KUBELET_BIN"; }

build_etcd() {
	if [[ -x "$ETCD_BIN" ]]; then
		log "etcd $ETCD_VERSION already built: $ETCD_BIN"
		return 0
	fi
	local root="$CACHE/etcd-$ETCD_VERSION"
	local src="$root/src"
	mkdir -p "$src" "$root/bin"
	printf 'module walras.dev/build/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
		"$ETCD_VERSION" >"$src/go.mod"
	rm -f "$src/go.sum"
	log "etcd: resolving modules (go get)"
	(cd "$src" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
	log "etcd: go build -p $GO_PARALLEL"
	local start=$SECONDS
	(cd "$src" && CGO_ENABLED=0 go build -p "$GO_PARALLEL" -trimpath -ldflags "-s -w" \
		-o "$root/bin/etcd.tmp" go.etcd.io/etcd/server/v3)
	mv "$root/bin/etcd.tmp" "$ETCD_BIN"
	log "etcd built in $((SECONDS - start)) s: $("$ETCD_BIN" --version | head -1)"
}

build_kwok() {
	if [[ -x "$KWOK_BIN" ]]; then
		log "kwok $KWOK_VERSION already built: $KWOK_BIN"
		return 0
	fi
	local root="$CACHE/kwok-$KWOK_VERSION"
	mkdir -p "$root/bin"
	log "kwok: go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	local start=$SECONDS
	GOBIN="$root/bin" CGO_ENABLED=0 go install -p "$GO_PARALLEL" -trimpath -ldflags "-s -w" \
		"sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	log "kwok built in $((SECONDS - start)) s"
}

# JobSet's controller manager (sigs.k8s.io/jobset, whose main package is the module root) and the
# JobSet CRD of the same module version. `go install sigs.k8s.io/jobset@v...` cannot be used: it
# asks the proxy for the module's version list (to report a deprecation), which the proxy may
# refuse while it serves the version itself; a wrapper module that requires the version builds it.
build_jobset() {
	if [[ -x "$JOBSET_BIN" && -f "$JOBSET_CRD" ]]; then
		log "jobset $JOBSET_VERSION already built: $JOBSET_BIN"
		return 0
	fi
	local root="$CACHE/jobset-$JOBSET_VERSION"
	local src="$root/src"
	mkdir -p "$src" "$root/bin" "$root/crds"
	printf 'module walras.dev/build/jobset\n\ngo 1.26\n\nrequire sigs.k8s.io/jobset %s\n' \
		"$JOBSET_VERSION" >"$src/go.mod"
	rm -f "$src/go.sum"
	log "jobset: resolving modules"
	local moddir
	moddir="$(cd "$src" && go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	local crd="$moddir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
	[[ -f "$crd" ]] || die "sigs.k8s.io/jobset@$JOBSET_VERSION has no CRD at $crd"
	log "jobset: go build -p $GO_PARALLEL"
	local start=$SECONDS
	(cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -p "$GO_PARALLEL" -trimpath \
		-ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
		-o "$root/bin/jobset-controller.tmp" sigs.k8s.io/jobset)
	install -m 0644 "$crd" "$JOBSET_CRD.tmp"  # the module cache is read-only
	mv "$JOBSET_CRD.tmp" "$JOBSET_CRD"
	mv "$root/bin/jobset-controller.tmp" "$JOBSET_BIN"
	log "jobset built in $((SECONDS - start)) s"
}

cmd_build() {
	command -v go >/dev/null || die "go is not installed (Go >= 1.26 is needed to build Kubernetes ${K8S_VERSION})"
	mkdir -p "$CACHE"
	# One build at a time per cache (several shells or CI steps may call `make tools` together).
	if command -v flock >/dev/null; then
		exec 9>"$CACHE/.build.lock"
		flock 9
	fi
	local start=$SECONDS
	build_etcd
	build_kwok
	build_jobset
	build_apiserver
	build_controller_manager
	build_kubelet
	log "build finished in $((SECONDS - start)) s"
}

cmd_paths() {
	printf 'KUBE_APISERVER=%s\nETCD=%s\nKWOK=%s\nKUBE_CONTROLLER_MANAGER=%s\nKUBELET=%s\n' \
		"$APISERVER_BIN" "$ETCD_BIN" "$KWOK_BIN" "$KCM_BIN" "$KUBELET_BIN"
	printf 'JOBSET_CONTROLLER=%s\nJOBSET_CRD=%s\n' "$JOBSET_BIN" "$JOBSET_CRD"
}

# ---------------------------------------------------------------------------------------------
# start / stop / env
# ---------------------------------------------------------------------------------------------

# Loopback ports only: the kernel picks N distinct free ports (all bound at once, then released)
# and we hand them to the servers. A port could in principle be taken in between; start then
# fails loudly and walras.testing.devcluster retries. One interpreter start, not one per port: behind a
# pyenv shim each start costs about a second.
free_ports() {
	local python=python3
	[[ -x /usr/bin/python3 ]] && python=/usr/bin/python3
	"$python" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

random_token() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# Is PID alive with NEEDLE in its command line? Guards `stop` against PIDs the kernel reused.
pid_runs() {
	local pid="$1" needle="$2"
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$needle"
}

# signal_and_wait NAME PID BINARY SIGNAL: send SIGNAL, allow up to 10 s to exit, then SIGKILL and
# wait up to 10 s more until it is gone (pid_runs: a PID reused by another program counts as
# gone). Bounded, so that a process stuck in the kernel cannot hang a stop.
signal_and_wait() {
	local name="$1" pid="$2" binary="$3" signal="$4"
	kill "-$signal" "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < 100; i++)); do
		pid_runs "$pid" "$binary" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) ignored SIG$signal; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		pid_runs "$pid" "$binary" || return 0
		sleep 0.05
	done
	log "$name (pid $pid) still there 10 s after SIGKILL"
}

# Stop one component by its PID file: SIGTERM, up to 10 s grace, then SIGKILL.
stop_component() {
	local dir="$1" name="$2" binary="$3"
	local file="$dir/$name.pid"
	[[ -f "$file" ]] || return 0
	local pid
	pid="$(cat "$file")"
	if pid_runs "$pid" "$binary"; then
		signal_and_wait "$name" "$pid" "$binary" TERM
	fi
	rm -f "$file"
}

stop_all() {
	local dir="$1"
	stop_component "$dir" watchdog "control-plane.sh watch $dir"
	# Real nodes first (hack/real-node.sh): their kubelets still talk to the API server.
	if [[ -d "$dir/nodes" ]]; then
		bash "$HACK_DIR/real-node.sh" stop-all "$dir" || log "stopping the real nodes failed"
	fi
	stop_component "$dir" jobset-controller "$JOBSET_BIN"
	stop_component "$dir" kwok "$KWOK_BIN"
	stop_component "$dir" kube-controller-manager "$KCM_BIN"
	stop_component "$dir" kube-apiserver "$APISERVER_BIN"
	stop_component "$dir" etcd "$ETCD_BIN"
}

make_certs() {
	local pki="$1"
	mkdir -p "$pki"
	# ECDSA P-256 keys: instant to generate, and every component speaks them.
	openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 -subj "/CN=walras-dev-ca" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		2>/dev/null
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
	printf '%s\n' \
		"basicConstraints=CA:FALSE" \
		"keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth" \
		"subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
		>"$pki/apiserver.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
		-CAcreateserial -out "$pki/apiserver.crt" -days 3650 -extfile "$pki/apiserver.ext" 2>/dev/null
	# The API server's client certificate towards kubelets (logs, exec on real nodes).
	client_cert "$pki/apiserver-kubelet-client" "$pki/ca.crt" "$pki/ca.key" \
		"/O=system:masters/CN=kube-apiserver-kubelet-client" 3650
	# Service-account token signing key pair (TokenRequest, projected tokens); tokens are ES256.
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/sa.key" 2>/dev/null
	openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	chmod 0600 "$pki"/*.key
}

# Print the tail of every log, copy the logs somewhere that outlives DIR, kill what was started.
START_DIR=""
START_OK=0
on_start_exit() {
	local rc=$?
	[[ "$START_OK" == 1 || -z "$START_DIR" ]] && return 0
	local keep
	keep="${WALRAS_FAILED_LOGS_DIR:-${TMPDIR:-/tmp}}/walras-control-plane-failed-$(date -u +%Y%m%dT%H%M%S)-$$"
	mkdir -p "$keep"
	cp -r "$START_DIR/logs/." "$keep/" 2>/dev/null || true
	local f
	for f in "$START_DIR"/logs/*.log; do
		[[ -f "$f" ]] || continue
		printf '\n===== %s (last 25 lines) =====\n' "$f" >&2
		tail -n 25 "$f" >&2 || true
	done
	stop_all "$START_DIR"
	log "start failed (exit $rc); processes stopped, logs copied to $keep"
}

wait_ready() {
	local url="$1" ca="$2" token="$3" pid="$4" timeout="$5"
	local deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		kill -0 "$pid" 2>/dev/null || die "kube-apiserver exited before it became ready"
		if curl --silent --fail --max-time 2 --cacert "$ca" -H "Authorization: Bearer $token" \
			"$url/readyz" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	die "kube-apiserver not ready after ${timeout}s: $url/readyz"
}

wait_etcd() {
	local url="$1" pid="$2" timeout="$3"
	local deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		kill -0 "$pid" 2>/dev/null || die "etcd exited before it became healthy"
		curl --silent --fail --max-time 2 "$url/health" 2>/dev/null | grep -q '"health":"true"' && return 0
		sleep 0.1
	done
	die "etcd not healthy after ${timeout}s: $url/health"
}

cmd_start() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || die "usage: $0 start DIR"
	local b
	for b in "$ETCD_BIN" "$APISERVER_BIN" "$KCM_BIN" "$KWOK_BIN"; do
		[[ -x "$b" ]] || die "$b is missing: run '$0 build' first"
	done
	command -v openssl >/dev/null || die "openssl is needed for certificates"
	command -v curl >/dev/null || die "curl is needed for readiness checks"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	if compgen -G "$dir/*.pid" >/dev/null; then
		die "$dir already holds a control plane (PID files present); stop it first"
	fi
	START_DIR="$dir"
	trap on_start_exit EXIT
	local t0=$SECONDS
	mkdir -p "$dir/logs" "$dir/etcd-data" "$dir/kwok-home"
	make_certs "$dir/pki"

	local admin_token operator_token
	admin_token="$(random_token)"
	operator_token="$(random_token)"
	# Static tokens: token,user,uid,"groups". The operator's token authenticates exactly as the
	# ServiceAccount walras-system/walras-controller would, so RBAC bindings to that
	# ServiceAccount (the chart's) apply to it; it needs no ServiceAccount object or token controller.
	(
		umask 077
		printf '%s,walras-admin,walras-admin,"system:masters"\n' "$admin_token"
		printf '%s,system:serviceaccount:walras-system:walras-controller,walras-controller,"system:serviceaccounts,system:serviceaccounts:walras-system,system:authenticated"\n' \
			"$operator_token"
	) >"$dir/pki/tokens.csv"
	chmod 0600 "$dir/pki/tokens.csv"

	local etcd_port etcd_peer_port api_port
	read -r etcd_port etcd_peer_port api_port < <(free_ports 3)
	[[ -n "$api_port" ]] || die "could not pick free loopback ports (python3 is needed)"
	local etcd_url="http://127.0.0.1:$etcd_port"
	local server="https://127.0.0.1:$api_port"

	# etcd: plain HTTP is acceptable because it listens on loopback only. --unsafe-no-fsync trades
	# crash safety (irrelevant for a throw-away test store) for speed on a shared disk.
	"$ETCD_BIN" --name walras-dev --data-dir "$dir/etcd-data" \
		--listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
		--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
		--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
		--initial-cluster "walras-dev=http://127.0.0.1:$etcd_peer_port" \
		--initial-cluster-state new --unsafe-no-fsync --log-level warn \
		</dev/null >"$dir/logs/etcd.log" 2>&1 &
	echo $! >"$dir/etcd.pid"
	wait_etcd "$etcd_url" "$(cat "$dir/etcd.pid")" 30
	log "etcd healthy at $((SECONDS - t0)) s"

	# kube-apiserver. kube-controller-manager (below) runs only the garbage collector, the
	# namespace, resource quota and ServiceAccount controllers, so:
	# - no token controller: ServiceAccount admission stays on (as in a real cluster), so a pod must
	#   name an existing ServiceAccount (the ServiceAccount controller creates `default`, and the
	#   `namespace` fixture does too, without waiting for it); see devcluster.py.
	# - no node lifecycle controller: it is what removes the node.kubernetes.io/not-ready taint
	#   that the TaintNodesByCondition admission plugin puts on every new node, so that plugin is
	#   off (kwok nodes would stay tainted forever otherwise);
	# - the `kubernetes` Service gets no endpoints (--endpoint-reconciler-type=none): endpoints may
	#   not be loopback addresses, and nothing here needs them.
	"$APISERVER_BIN" \
		--etcd-servers="$etcd_url" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
		--tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
		--client-ca-file="$dir/pki/ca.crt" \
		--token-auth-file="$dir/pki/tokens.csv" \
		--authorization-mode=Node,RBAC \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$dir/pki/sa.pub" \
		--service-account-signing-key-file="$dir/pki/sa.key" \
		--api-audiences=https://kubernetes.default.svc.cluster.local \
		--service-cluster-ip-range=10.96.0.0/16 \
		--allow-privileged=true \
		--profiling=false \
		--cert-dir="$dir/pki/generated" \
		--event-ttl=1h \
		--endpoint-reconciler-type=none \
		--disable-admission-plugins=TaintNodesByCondition \
		--kubelet-client-certificate="$dir/pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$dir/pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--v="${WALRAS_APISERVER_VERBOSITY:-1}" \
		</dev/null >"$dir/logs/kube-apiserver.log" 2>&1 &
	echo $! >"$dir/kube-apiserver.pid"
	wait_ready "$server" "$dir/pki/ca.crt" "$admin_token" "$(cat "$dir/kube-apiserver.pid")" \
		"${WALRAS_APISERVER_READY_TIMEOUT:-60}"
	log "kube-apiserver ready at $((SECONDS - t0)) s"

	write_kubeconfig "$dir/admin.kubeconfig" "$server" "$dir/pki/ca.crt" walras-admin default \
		"token=$admin_token"
	write_kubeconfig "$dir/operator.kubeconfig" "$server" "$dir/pki/ca.crt" walras-controller \
		default "token=$operator_token"

	# kube-controller-manager with the controllers tests rely on: garbage collector (deleting a
	# FungibleJob removes its pods through their ownerReferences), namespace (a deleted namespace is
	# emptied and removed), resource quota (ResourceQuota usage is computed, so quota admission
	# works), ServiceAccount (`default` in every namespace) and ClusterRole aggregation (the
	# built-in admin/edit/view roles get their rules, as users get them) and Job (a Job labelled
	# walras.dev/managed is run through its suspend field: its controller makes and deletes the
	# pods). Not the node lifecycle controller:
	# kwok's heartbeats are slower than its grace period, so it would mark nodes NotReady. No
	# serving port (--secure-port=0): several control planes may run side by side.
	# With WALRAS_REAL_NODES=1 (walras.testing.devcluster sets it for real nodes, hack/real-node.sh)
	# it also runs the root-CA publisher (a pod's ServiceAccount token volume waits for the
	# kube-root-ca.crt ConfigMap) and the node lifecycle controller (a dead kubelet's node turns
	# NotReady); kwok then renews a Lease per node, so its nodes stay Ready too.
	local controllers=garbage-collector-controller,namespace-controller,resourcequota-controller,serviceaccount-controller,clusterrole-aggregation-controller,job-controller
	local kwok_lease=()
	local lifecycle=()
	if [[ "${WALRAS_REAL_NODES:-0}" == 1 ]]; then
		controllers+=,root-ca-certificate-publisher-controller,node-lifecycle-controller
		# Upstream's default: a node whose kubelet stopped is NotReady 50 s later.
		lifecycle=(--node-monitor-grace-period="${WALRAS_NODE_MONITOR_GRACE_PERIOD:-50s}")
		kwok_lease=(--node-lease-duration-seconds=40)
	fi
	"$KCM_BIN" \
		--kubeconfig="$dir/admin.kubeconfig" \
		--controllers="$controllers" \
		--root-ca-file="$dir/pki/ca.crt" \
		"${lifecycle[@]}" \
		--leader-elect=false \
		--secure-port=0 \
		--use-service-account-credentials=false \
		--concurrent-gc-syncs=5 \
		--concurrent-namespace-syncs=4 \
		--resource-quota-sync-period=10s \
		--namespace-sync-period=30s \
		--kube-api-qps=100 --kube-api-burst=200 \
		--v="${WALRAS_APISERVER_VERBOSITY:-1}" \
		</dev/null >"$dir/logs/kube-controller-manager.log" 2>&1 &
	echo $! >"$dir/kube-controller-manager.pid"

	# kwok: our stages only (standalone kwok ships none), nodes selected by annotation, its own
	# HTTP server disabled (no --server-address/--node-port), HOME sandboxed so a stray
	# ~/.kwok/kwok.yaml is not merged in.
	local stages="$dir/kwok-stages.yaml"
	: >"$stages"
	local f
	for f in "$HACK_DIR"/kwok/*.yaml; do
		printf -- '---\n' >>"$stages"
		cat "$f" >>"$stages"
	done
	HOME="$dir/kwok-home" "$KWOK_BIN" \
		--kubeconfig="$dir/admin.kubeconfig" \
		--config="$stages" \
		--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--node-ip=127.0.0.1 \
		--cidr=10.0.0.0/16 \
		"${kwok_lease[@]}" \
		</dev/null >"$dir/logs/kwok.log" 2>&1 &
	echo $! >"$dir/kwok.pid"
	sleep 0.5
	kill -0 "$(cat "$dir/kwok.pid")" 2>/dev/null || die "kwok exited at start"
	kill -0 "$(cat "$dir/kube-controller-manager.pid")" 2>/dev/null ||
		die "kube-controller-manager exited at start"

	cat >"$dir/cluster.env" <<EOF
SERVER=$server
CA_FILE=$dir/pki/ca.crt
ADMIN_KUBECONFIG=$dir/admin.kubeconfig
OPERATOR_KUBECONFIG=$dir/operator.kubeconfig
ETCD_URL=$etcd_url
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
KWOK_VERSION=$KWOK_VERSION
TOOLS_BIN=$CACHE/bin
EOF
	# Watchdog: when WALRAS_OWNER_PID is set (walras.testing.devcluster sets it to the Python process),
	# stop this control plane as soon as that process is gone, so a killed test run (timeout,
	# Ctrl-C, OOM) leaves no apiserver behind on a shared machine.
	if [[ -n "${WALRAS_OWNER_PID:-}" ]]; then
		nohup bash "$HACK_DIR/control-plane.sh" watch "$dir" "$WALRAS_OWNER_PID" \
			</dev/null >>"$dir/logs/watchdog.log" 2>&1 &
		echo $! >"$dir/watchdog.pid"
	fi
	START_OK=1
	log "control plane up in $((SECONDS - t0)) s: $server (KUBECONFIG=$dir/admin.kubeconfig)"
}

# ---------------------------------------------------------------------------------------------
# JobSet controller
# ---------------------------------------------------------------------------------------------

JOBSET_WEBHOOKS=(jobset-mutating-webhook-configuration jobset-validating-webhook-configuration)

# curl against DIR's API server as its admin: api DIR METHOD PATH [curl options...]
api() {
	local dir="$1" method="$2" path="$3"
	shift 3
	local token server
	token="$(sed -n 's/^[[:space:]]*token: //p' "$dir/admin.kubeconfig")"
	server="$(sed -n 's/^SERVER=//p' "$dir/cluster.env")"
	curl --silent --show-error --fail --max-time 30 --cacert "$dir/pki/ca.crt" \
		-H "Authorization: Bearer $token" -X "$method" "$@" "$server$path"
}

# Server-side apply of a YAML file: apply_yaml DIR PATH FILE
apply_yaml() {
	api "$1" PATCH "$2?fieldManager=walras-dev&force=true" \
		-H 'Content-Type: application/apply-patch+yaml' --data-binary "@$3" >/dev/null
}

# One of JobSet's webhooks (upstream config/components/webhook with its pod objectSelector patch),
# called by URL on loopback instead of through a Service:
# jobset_webhook NAME PATH GROUP RESOURCE OPERATIONS URL CA_BUNDLE [pods]
jobset_webhook() {
	local name="$1" path="$2" group="$3" resource="$4" ops="$5" url="$6" ca="$7" pods="${8:-}"
	local version=v1alpha2
	[[ -z "$group" ]] && version=v1
	printf -- '- name: %s\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n' "$name"
	printf '  clientConfig:\n    url: %s%s\n    caBundle: %s\n' "$url" "$path" "$ca"
	printf '  rules:\n  - apiGroups: ["%s"]\n    apiVersions: [%s]\n    operations: [%s]\n    resources: [%s]\n' \
		"$group" "$version" "$ops" "$resource"
	if [[ -n "$pods" ]]; then
		printf '  objectSelector:\n    matchExpressions:\n    - {key: jobset.sigs.k8s.io/jobset-name, operator: Exists}\n'
	fi
}

# The JobSet controller against DIR's control plane, as its Deployment runs it upstream, except:
# - its webhooks (JobSet defaulting and validation; pod mutation and admission, which only act for
#   exclusive placement) are served on a loopback port with a certificate from DIR's CA and
#   registered with the API server by URL with that CA. Its internal cert rotation, which writes a
#   Secret for a Service the API server would reach in-cluster, is off. So JobSets are defaulted
#   and validated by JobSet's own code, as in a cluster.
# - it runs as the admin (DIR/admin.kubeconfig), not as its ServiceAccount with the upstream
#   ClusterRole, and without leader election, metrics or health endpoints.
cmd_start_jobset() {
	local dir="${1:-}"
	[[ -n "$dir" && -f "$dir/cluster.env" ]] || die "usage: $0 start-jobset DIR (a started control plane)"
	dir="$(cd "$dir" && pwd)"
	[[ -x "$JOBSET_BIN" && -f "$JOBSET_CRD" ]] || die "$JOBSET_BIN is missing: run '$0 build-jobset' first"
	if pid_runs "$(cat "$dir/jobset-controller.pid" 2>/dev/null || true)" "$JOBSET_BIN"; then
		log "the JobSet controller already runs for $dir"
		return 0
	fi
	local t0=$SECONDS
	local home="$dir/jobset"
	mkdir -p "$home/certs" "$dir/logs"
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$home/certs/tls.key" -out "$home/certs/tls.csr" -subj "/CN=jobset-webhook" 2>/dev/null
	printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1" >"$home/certs/tls.ext"
	openssl x509 -req -in "$home/certs/tls.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
		-CAcreateserial -out "$home/certs/tls.crt" -days 3650 -extfile "$home/certs/tls.ext" 2>/dev/null
	chmod 0600 "$home/certs/tls.key"
	local port
	port="$(free_ports 1)"
	printf '%s\n' \
		"apiVersion: config.jobset.x-k8s.io/v1alpha1" \
		"kind: Configuration" \
		"internalCertManagement:" \
		"  enable: false" \
		"webhook:" \
		"  host: 127.0.0.1" \
		"  port: $port" \
		"  certDir: $home/certs" >"$home/config.yaml"

	apply_yaml "$dir" /apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io \
		"$JOBSET_CRD" || die "could not apply the JobSet CRD"
	local deadline=$((SECONDS + 60))
	until api "$dir" GET /apis/jobset.x-k8s.io/v1alpha2/jobsets >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "the JobSet CRD is not served after 60 s"
		sleep 0.2
	done

	"$JOBSET_BIN" \
		--kubeconfig="$dir/admin.kubeconfig" \
		--config="$home/config.yaml" \
		--leader-elect=false \
		--metrics-bind-address=0 \
		--health-probe-bind-address=0 \
		</dev/null >"$dir/logs/jobset-controller.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$dir/jobset-controller.pid"
	# Its webhook server starts once its controllers are set up (main.go sets both up together).
	deadline=$((SECONDS + 60))
	until curl --silent --max-time 2 --cacert "$dir/pki/ca.crt" -o /dev/null \
		"https://127.0.0.1:$port/healthz" 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null ||
			die "the JobSet controller exited at start (see $dir/logs/jobset-controller.log)"
		((SECONDS < deadline)) || die "the JobSet controller serves no webhook after 60 s"
		sleep 0.2
	done

	local url="https://127.0.0.1:$port" ca
	ca="$(base64 -w0 <"$dir/pki/ca.crt")"
	{
		printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n'
		printf 'metadata:\n  name: %s\nwebhooks:\n' "${JOBSET_WEBHOOKS[0]}"
		jobset_webhook mjobset.kb.io /mutate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io jobsets \
			CREATE "$url" "$ca"
		jobset_webhook mpod.kb.io /mutate--v1-pod "" pods CREATE "$url" "$ca" pods
	} >"$home/mutating.yaml"
	{
		printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n'
		printf 'metadata:\n  name: %s\nwebhooks:\n' "${JOBSET_WEBHOOKS[1]}"
		jobset_webhook vjobset.kb.io /validate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io jobsets \
			"CREATE, UPDATE" "$url" "$ca"
		jobset_webhook vpod.kb.io /validate--v1-pod "" pods CREATE "$url" "$ca" pods
	} >"$home/validating.yaml"
	local admission=/apis/admissionregistration.k8s.io/v1
	apply_yaml "$dir" "$admission/mutatingwebhookconfigurations/${JOBSET_WEBHOOKS[0]}" \
		"$home/mutating.yaml" || die "could not register JobSet's mutating webhooks"
	apply_yaml "$dir" "$admission/validatingwebhookconfigurations/${JOBSET_WEBHOOKS[1]}" \
		"$home/validating.yaml" || die "could not register JobSet's validating webhooks"
	log "JobSet controller $JOBSET_VERSION up in $((SECONDS - t0)) s (pid $pid, webhooks on $url)"
}

# Webhook configurations first: with failurePolicy Fail, a JobSet (or a JobSet's pod) created
# while they point at a stopped controller would be refused.
cmd_stop_jobset() {
	local dir="${1:-}"
	[[ -n "$dir" && -d "$dir" ]] || die "usage: $0 stop-jobset DIR"
	dir="$(cd "$dir" && pwd)"
	if [[ -f "$dir/cluster.env" && -f "$dir/kube-apiserver.pid" ]]; then
		local admission=/apis/admissionregistration.k8s.io/v1
		api "$dir" DELETE "$admission/mutatingwebhookconfigurations/${JOBSET_WEBHOOKS[0]}" >/dev/null 2>&1 || true
		api "$dir" DELETE "$admission/validatingwebhookconfigurations/${JOBSET_WEBHOOKS[1]}" >/dev/null 2>&1 || true
	fi
	stop_component "$dir" jobset-controller "$JOBSET_BIN"
}

cmd_stop() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || die "usage: $0 stop DIR"
	[[ -d "$dir" ]] || {
		log "$dir does not exist; nothing to stop"
		return 0
	}
	dir="$(cd "$dir" && pwd)"
	stop_all "$dir"
	rm -rf "$dir"
	log "stopped and removed $dir"
}

cmd_watch() {
	local dir="${1:-}" owner="${2:-}"
	[[ -n "$dir" && -n "$owner" ]] || die "usage: $0 watch DIR OWNER_PID"
	while kill -0 "$owner" 2>/dev/null && [[ -f "$dir/kube-apiserver.pid" ]]; do
		sleep 2
	done
	[[ -d "$dir" ]] || return 0
	if [[ -f "$dir/kube-apiserver.pid" ]]; then
		log "owner process $owner is gone; stopping the control plane in $dir"
		rm -f "$dir/watchdog.pid"
		cmd_stop "$dir"
	fi
}

# ---------------------------------------------------------------------------------------------
# one component down and up again (fault injection)
# ---------------------------------------------------------------------------------------------

# The binary of a restartable component (the PID guard's needle).
component_binary() {
	case "$1" in
	etcd) printf '%s\n' "$ETCD_BIN" ;;
	kube-apiserver) printf '%s\n' "$APISERVER_BIN" ;;
	kube-controller-manager) printf '%s\n' "$KCM_BIN" ;;
	*) die "cannot restart '$1': one of etcd, kube-apiserver, kube-controller-manager" ;;
	esac
}

# COMPONENT DIR or DIR COMPONENT, printed as DIR COMPONENT (the issue's order and this script's).
component_args() {
	case "${1:-}" in
	etcd | kube-apiserver | kube-controller-manager) printf '%s\n%s\n' "${2:-}" "$1" ;;
	*) printf '%s\n%s\n' "${1:-}" "${2:-}" ;;
	esac
}

# Stop one component, keeping its command line (from /proc) so start-component can run it again.
# Its PID file stays (pointing at a dead process) until start-component replaces it, so the
# watchdog, which runs while kube-apiserver.pid exists, keeps watching through the outage.
cmd_stop_component() {
	local dir="${1:-}" name="${2:-}" signal=TERM
	[[ -n "$dir" && -n "$name" ]] || die "usage: $0 stop-component DIR COMPONENT [--kill]"
	[[ "${3:-}" == "--kill" ]] && signal=KILL
	local binary
	binary="$(component_binary "$name")"
	dir="$(cd "$dir" && pwd)"
	local pid
	pid="$(cat "$dir/$name.pid" 2>/dev/null || true)"
	pid_runs "$pid" "$binary" || die "$name is not running in $dir"
	cp "/proc/$pid/cmdline" "$dir/$name.cmdline"
	signal_and_wait "$name" "$pid" "$binary" "$signal"
	log "$name stopped (SIG$signal, pid $pid)"
}

# Start a component stopped by stop-component with the same command line; wait until it serves.
cmd_start_component() {
	local dir="${1:-}" name="${2:-}"
	[[ -n "$dir" && -n "$name" ]] || die "usage: $0 start-component DIR COMPONENT"
	component_binary "$name" >/dev/null
	dir="$(cd "$dir" && pwd)"
	[[ -f "$dir/$name.cmdline" ]] || die "$name was not stopped with stop-component in $dir"
	local -a argv
	mapfile -d '' -t argv <"$dir/$name.cmdline"
	local t0=$SECONDS
	"${argv[@]}" </dev/null >>"$dir/logs/$name.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$dir/$name.pid"
	rm -f "$dir/$name.cmdline"
	local env_file="$dir/cluster.env"
	case "$name" in
	etcd) wait_etcd "$(sed -n 's/^ETCD_URL=//p' "$env_file")" "$pid" 30 ;;
	kube-apiserver)
		local token
		token="$(sed -n 's/^[[:space:]]*token: //p' "$dir/admin.kubeconfig")"
		wait_ready "$(sed -n 's/^SERVER=//p' "$env_file")" "$(sed -n 's/^CA_FILE=//p' "$env_file")" \
			"$token" "$pid" "${WALRAS_APISERVER_READY_TIMEOUT:-60}"
		;;
	*)
		sleep 0.5
		kill -0 "$pid" 2>/dev/null || die "$name exited at start"
		;;
	esac
	log "$name started again (pid $pid), serving after $((SECONDS - t0)) s"
}

cmd_restart() {
	local dir="${1:-}" name="${2:-}"
	[[ -n "$dir" && -n "$name" ]] || die "usage: $0 restart DIR COMPONENT [--down SECONDS] [--kill]"
	shift 2
	local down=0 kill_flag=""
	while (($#)); do
		case "$1" in
		--down)
			down="${2:-}"
			[[ "$down" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--down needs a number of seconds, got '$down'"
			shift 2
			;;
		--kill)
			kill_flag=--kill
			shift
			;;
		*) die "restart: unknown option '$1'" ;;
		esac
	done
	cmd_stop_component "$dir" "$name" $kill_flag
	sleep "$down"
	cmd_start_component "$dir" "$name"
}

cmd_env() {
	local dir="${1:-}"
	[[ -n "$dir" && -f "$dir/admin.kubeconfig" ]] || die "usage: $0 env DIR (a started control plane)"
	dir="$(cd "$dir" && pwd)"
	printf 'export KUBECONFIG=%q\n' "$dir/admin.kubeconfig"
	# shellcheck disable=SC2016  # $PATH must expand in the caller's shell, not here
	printf 'export PATH=%q:"$PATH"\n' "$CACHE/bin"
}

main() {
	local cmd="${1:-}"
	shift || true
	case "$cmd" in
	build) cmd_build ;;
	build-kubelet) build_kubelet ;;
	build-jobset) build_jobset ;;
	start-jobset) cmd_start_jobset "$@" ;;
	stop-jobset) cmd_stop_jobset "$@" ;;
	paths) cmd_paths ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	env) cmd_env "$@" ;;
	watch) cmd_watch "$@" ;;
	restart | stop-component | start-component)
		local -a where
		mapfile -t where < <(component_args "${1:-}" "${2:-}")
		shift $(($# < 2 ? $# : 2))
		"cmd_${cmd//-/_}" "${where[0]}" "${where[1]}" "$@"
		;;
	*)
		printf 'usage: %s build|paths|start DIR|stop DIR|env DIR|restart DIR COMPONENT\n' "$0" >&2
		exit 2
		;;
	esac
}

main "$@"
