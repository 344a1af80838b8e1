#!/usr/bin/env bash
# Real nodes for the local control plane (hack/control-plane.sh): a real kubelet and its own
# containerd, running real containers, with fake GPUs from walras.testing.deviceplugin.
#
#   hack/real-node.sh build                       kubelet (control-plane.sh build-kubelet) and the
#                                                 pause image archive, into the cache
#   hack/real-node.sh build-pause                 only the pause image
#   hack/real-node.sh build-tools                 pause and workload images, where real nodes can
#                                                 run (`make tools`; the kubelet comes from
#                                                 control-plane.sh build)
#   hack/real-node.sh check                       exit 1 with one line naming what this machine
#                                                 lacks for real nodes (root, cgroups, binaries)
#   hack/real-node.sh start DIR NAME [--gpus N] [--gpu-type T] [--python PY] [--image ARCHIVE]...
#                                                 join node NAME to the control plane in DIR
#   hack/real-node.sh stop DIR NAME               stop it and undo what it did to the host
#   hack/real-node.sh stop-all DIR                every node of DIR (control-plane.sh stop calls it)
#   hack/real-node.sh containers DIR NAME         the node runtime's containers (ctr, k8s.io)
#
# The control plane must have been started with WALRAS_REAL_NODES=1 (root-CA publisher and node
# lifecycle controller in kube-controller-manager). What a node is, and why:
# - containerd and runc and the CNI plugins are Debian's (`make tools`). Each node has its own
#   containerd (root, state, socket under DIR/nodes/NAME): a kubelet removes the sandboxes it does
#   not know, so two kubelets must never share a runtime. `restrict_oom_score_adj = true`, since
#   this machine's bounding set lacks CAP_SYS_RESOURCE and runc cannot raise a container's OOM
#   score otherwise. cgroupfs driver (containerd 1.6 cannot tell the kubelet its driver), on a cgroup
#   root of the node's own, /walras-nodeI, in every hierarchy. cgroup v1 is accepted
#   (`failCgroupV1: false`).
# - The node's address is 10.250.0.I/32 on an empty bridge walras-nodeI (the kubelet refuses a
#   loopback address and the kernel has no dummy device); pods get 10.251.I.0/24 on the CNI bridge
#   walras-cniI. Both ranges are private and the bridges have no ports to the outside, so nothing
#   leaves this machine: pods have routes to the Service range (10.96.0.0/16), the nodes and the
#   other nodes' pods only, no default route. I is the smallest index no other node on the
#   machine holds.
# - The kubelet authenticates with a client certificate (O=system:nodes, CN=system:node:NAME)
#   signed by the control plane's CA, so the Node authorizer applies; its own server accepts only
#   client certificates of that CA and webhook tokens, never anonymous requests.
# - The kubelet's device-plugin socket is fixed at /var/lib/kubelet/device-plugins/kubelet.sock,
#   whatever its root directory. So containerd and the kubelet of a node run in a mount namespace
#   of their own (`unshare --mount`, private propagation) in which that directory is a bind mount
#   of DIR/nodes/NAME/device-plugins. Every mount they make (container root filesystems, volume
#   tmpfs, network-namespace handles) lives in that namespace and goes with its last process: the
#   host's mount table never sees them. The device plugin connects to the same socket through
#   DIR/nodes/NAME/device-plugins from the host.
# - Pods reach the API server (which listens on loopback only) at the `kubernetes` Service's
#   address, 10.96.0.1:443, as in a cluster: that address sits on an empty bridge walras-svc and
#   walras.testing.apiproxy forwards it to the API server (one per control plane with real nodes).
# - The kubelet makes no iptables chains (`makeIPTablesUtilChains: false`: nothing here runs
#   kube-proxy, the only reader of them).
# - Host state that is shared by every node (net.ipv4.ip_forward, which the CNI bridge plugin sets;
#   /var/lib/cni, /var/log/containers, /var/lib/kubelet/device-plugins) is recorded in
#   /run/walras-real-nodes when the first node starts and restored when the last one stops.
#
# Environment: WALRAS_CACHE, WALRAS_K8S_VERSION (as control-plane.sh), WALRAS_KUBELET_VERBOSITY
# (default 1), WALRAS_NODE_READY_TIMEOUT (s, default 60).
set -o errexit -o nounset -o pipefail

# Builtins only up to `check`, so that it can name a missing tool even on a bare PATH.
_self="${BASH_SOURCE[0]}"
[[ "$_self" == */* ]] || _self="./$_self"
HACK_DIR="$(cd "${_self%/*}" && pwd)"
# shellcheck source=hack/lib/kubeconfig.sh
source "$HACK_DIR/lib/kubeconfig.sh"
# shellcheck source=hack/lib/pki.sh
source "$HACK_DIR/lib/pki.sh"
K8S_VERSION="${WALRAS_K8S_VERSION:-v1.36.3}"
CACHE="${WALRAS_CACHE:-$HOME/.cache/walras}"
KUBELET_BIN="$CACHE/kubelet-$K8S_VERSION/bin/kubelet"
PAUSE_VERSION=3.10.2
PAUSE_IMAGE="registry.k8s.io/pause:$PAUSE_VERSION"
PAUSE_TAR="$CACHE/pause-$PAUSE_VERSION/pause.tar"
CNI_BIN_DIR=/usr/lib/cni
HOST_STATE=/run/walras-real-nodes
GPU_TYPE_LABEL=walras.dev/gpu-type
REAL_NODE_LABEL=walras.dev/real-node
# The `kubernetes` Service's ClusterIP (first address of control-plane.sh's service range).
SERVICE_IP=10.96.0.1
SERVICE_BRIDGE=walras-svc
# Directories the kubelet or containerd create outside their own roots, whatever they are told.
SHARED_DIRS=(/var/lib/cni /var/log/containers /var/lib/kubelet/device-plugins /var/lib/kubelet
	/run/containerd/s /run/containerd)

log() { TZ=UTC printf '[real-node %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
usage() {
	sed -n '2,/^set -o/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

# ---------------------------------------------------------------------------------------------
# build, check
# ---------------------------------------------------------------------------------------------

# The pause image from pause.c in the k8s.io/kubernetes module (no registry here), as a
# docker-archive for `ctr images import`.
build_pause() {
	if [[ -s "$PAUSE_TAR" ]]; then
		log "pause image already built: $PAUSE_TAR"
		return 0
	fi
	command -v gcc >/dev/null || die "gcc is needed to build the pause image"
	command -v buildah >/dev/null || die "buildah is needed to build the pause image (make tools)"
	local dir mod src
	dir="$(dirname "$PAUSE_TAR")"
	mkdir -p "$dir/mod"
	[[ -f "$dir/mod/go.mod" ]] || printf 'module walras.dev/build/pause\n\ngo 1.26\n' >"$dir/mod/go.mod"
	mod="$(cd "$dir/mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	src="$mod/build/pause/linux/pause.c"
	[[ -f "$src" ]] || die "no $src in k8s.io/kubernetes@$K8S_VERSION"
	local tmp
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/walras-pause.XXXXXX")"
	gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION" -o "$tmp/pause" "$src"
	local flags=(--root "$dir/store" --runroot /run/walras-pause-buildah --storage-driver vfs)
	local ctr mnt
	ctr="$(buildah "${flags[@]}" from --quiet scratch)"
	mnt="$(buildah "${flags[@]}" mount "$ctr")"
	install -m 0755 "$tmp/pause" "$mnt/pause"
	buildah "${flags[@]}" umount "$ctr" >/dev/null
	buildah "${flags[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
	buildah "${flags[@]}" commit --quiet --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
	buildah "${flags[@]}" push --quiet "$PAUSE_IMAGE" "docker-archive:$tmp/pause.tar:$PAUSE_IMAGE" >&2
	buildah "${flags[@]}" rmi "$PAUSE_IMAGE" >/dev/null
	mv "$tmp/pause.tar" "$PAUSE_TAR"
	rm -rf "$tmp"
	log "pause image built: $PAUSE_TAR"
}

cmd_build() {
	bash "$HACK_DIR/control-plane.sh" build-kubelet
	build_pause
}

# `make tools` (after control-plane.sh build, which builds the kubelet): the pause and workload
# images where real nodes can run; elsewhere one line saying why not.
cmd_build_tools() {
	if [[ "$(uname -s)" != Linux ]] || ((EUID != 0)); then
		log "note: real nodes need root on Linux; pause and workload images not built"
		return 0
	fi
	build_pause
	bash "$HACK_DIR/build-workload-image.sh" >/dev/null
}

# One line naming the first missing capability; status 1. Nothing on success.
cmd_check() {
	[[ "$(uname -s)" == Linux ]] || die "real nodes need Linux (this is $(uname -s))"
	((EUID == 0)) || die "real nodes need root (kubelet, containerd, bridges, cgroups)"
	[[ -d /sys/fs/cgroup/cpu || -f /sys/fs/cgroup/cgroup.controllers ]] ||
		die "real nodes need cgroups: nothing mounted at /sys/fs/cgroup"
	[[ -f /sys/fs/cgroup/cgroup.controllers ]] && [[ ! -d /sys/fs/cgroup/cpu ]] &&
		die "real nodes are set up for cgroup v1 (cgroupfs); this machine has cgroup v2 only"
	local tool
	for tool in containerd containerd-shim-runc-v2 runc ctr unshare nsenter ip sysctl openssl curl \
		buildah debootstrap; do
		command -v "$tool" >/dev/null ||
			die "real nodes need $tool: run \`make tools\` (apt: containerd runc containernetworking-plugins buildah debootstrap)"
	done
	local plugin
	for plugin in bridge host-local loopback; do
		[[ -x "$CNI_BIN_DIR/$plugin" ]] ||
			die "real nodes need the CNI plugin $CNI_BIN_DIR/$plugin: run \`make tools\` (apt: containernetworking-plugins)"
	done
	[[ -x "$KUBELET_BIN" ]] || die "real nodes need the kubelet: $KUBELET_BIN is missing (make tools)"
	[[ -s "$PAUSE_TAR" ]] || die "real nodes need the pause image: $PAUSE_TAR is missing (make tools)"
	ip link add walras-probe0 type bridge 2>/dev/null ||
		die "real nodes need Linux bridges: \`ip link add TYPE bridge\` failed"
	ip link del walras-probe0
}

# ---------------------------------------------------------------------------------------------
# host state shared by every node
# ---------------------------------------------------------------------------------------------

host_lock() {
	mkdir -p "$HOST_STATE"
	exec 7>"$HOST_STATE/.lock"
	flock 7
}

# Closed, not only unlocked: the node's long-lived processes must not inherit it.
host_unlock() {
	flock -u 7
	exec 7>&-
}

# Under host_lock: record the shared state before the first node changes it.
host_register() {
	local index="$1" node="$2"
	mkdir -p "$HOST_STATE/nodes"
	if [[ -z "$(ls -A "$HOST_STATE/nodes")" ]]; then
		sysctl -n net.ipv4.ip_forward >"$HOST_STATE/ip_forward"
		local d
		: >"$HOST_STATE/created"
		for d in "${SHARED_DIRS[@]}"; do
			[[ -e "$d" ]] || printf '%s\n' "$d" >>"$HOST_STATE/created"
		done
	fi
	printf '%s\n' "$node" >"$HOST_STATE/nodes/$index"
}

# Under host_lock: when the last node is gone, put the shared state back.
host_unregister() {
	local index="$1"
	rm -f "$HOST_STATE/nodes/$index"
	[[ -z "$(ls -A "$HOST_STATE/nodes" 2>/dev/null)" ]] || return 0
	if [[ -f "$HOST_STATE/ip_forward" ]]; then
		sysctl -qw "net.ipv4.ip_forward=$(cat "$HOST_STATE/ip_forward")" || true
		rm -f "$HOST_STATE/ip_forward"
	fi
	if [[ -f "$HOST_STATE/created" ]]; then
		local d
		while read -r d; do
			[[ -n "$d" && -e "$d" ]] || continue
			case "$d" in
			/var/lib/cni | /var/log/containers | /var/lib/kubelet/device-plugins)
				# Ours entirely: only our nodes wrote there since it was created.
				rm -rf "$d"
				;;
			*) rmdir "$d" 2>/dev/null || true ;;
			esac
		done < <(sort -r "$HOST_STATE/created")
		rm -f "$HOST_STATE/created"
	fi
}

# The smallest node index that no node of this machine holds (its bridge is the claim).
free_index() {
	local i
	for ((i = 1; i <= 250; i++)); do
		[[ -e "$HOST_STATE/nodes/$i" ]] && continue
		ip link show "walras-node$i" >/dev/null 2>&1 && continue
		printf '%s\n' "$i"
		return 0
	done
	die "no free real-node index (250 nodes on this machine?)"
}

# Under host_lock: the API server reachable from pods at $SERVICE_IP:443 (walras.testing.apiproxy,
# one per control plane with real nodes). One control plane at a time per machine can hold it.
ensure_api_proxy() {
	local dir="$1" python="$2" server="$3"
	if [[ -f "$dir/apiproxy.pid" ]] && pid_alive "$(cat "$dir/apiproxy.pid")"; then
		return 0
	fi
	if [[ -f "$HOST_STATE/service-owner" ]]; then
		local owner
		owner="$(cat "$HOST_STATE/service-owner")"
		if [[ "$owner" != "$dir" ]]; then
			# A claim whose forwarder is gone (its run was killed) is stale: take it over.
			if [[ -f "$owner/apiproxy.pid" ]] && pid_alive "$(cat "$owner/apiproxy.pid")"; then
				die "another control plane's real nodes ($owner) hold $SERVICE_IP; stop them first"
			fi
			log "taking $SERVICE_IP over from $owner, whose forwarder is gone"
		fi
	fi
	printf '%s\n' "$dir" >"$HOST_STATE/service-owner"
	ip link show "$SERVICE_BRIDGE" >/dev/null 2>&1 || ip link add "$SERVICE_BRIDGE" type bridge
	ip addr replace "$SERVICE_IP/32" dev "$SERVICE_BRIDGE"
	ip link set "$SERVICE_BRIDGE" up
	PYTHONPATH="$HACK_DIR/../src${PYTHONPATH:+:$PYTHONPATH}" "$python" -m walras.testing.apiproxy \
		--listen "$SERVICE_IP:443" --target "${server#https://}" \
		</dev/null >>"$dir/logs/apiproxy.log" 2>&1 &
	echo $! >"$dir/apiproxy.pid"
}

# Under host_lock: when DIR has no real node left, stop its forwarder and free the address.
release_api_proxy() {
	local dir="$1"
	[[ -z "$(ls -A "$dir/nodes" 2>/dev/null)" ]] || return 0
	if [[ -f "$dir/apiproxy.pid" ]]; then
		stop_pid "$(cat "$dir/apiproxy.pid")" walras.testing.apiproxy 50
		rm -f "$dir/apiproxy.pid"
	fi
	if [[ -f "$HOST_STATE/service-owner" && "$(cat "$HOST_STATE/service-owner")" == "$dir" ]]; then
		ip link del "$SERVICE_BRIDGE" 2>/dev/null || true
		rm -f "$HOST_STATE/service-owner"
	fi
}

cgroup_hierarchies() {
	local d
	for d in /sys/fs/cgroup/*; do
		[[ -d "$d" && ! -L "$d" ]] && [[ -f "$d/cgroup.procs" ]] && printf '%s\n' "$d"
	done
}

# ---------------------------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------------------------

node_dir() { printf '%s/nodes/%s\n' "$1" "$2"; }

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

START_NODE=""
START_DIR=""
START_OK=0
on_start_exit() {
	local rc=$?
	[[ "$START_OK" == 1 || -z "$START_NODE" ]] && return 0
	local node
	node="$(node_dir "$START_DIR" "$START_NODE")"
	local f
	for f in "$node"/logs/*.log; do
		[[ -f "$f" ]] || continue
		printf '\n===== %s (last 20 lines) =====\n' "$f" >&2
		tail -n 20 "$f" >&2 || true
	done
	cmd_stop "$START_DIR" "$START_NODE" || true
	log "start of $START_NODE failed (exit $rc); what it started is stopped"
}

cmd_start() {
	local dir="${1:-}" name="${2:-}"
	[[ -n "$dir" && -n "$name" ]] || usage
	shift 2
	local gpus=4 gpu_type=fake-gpu python="" images=()
	while (($#)); do
		case "$1" in
		--gpus) gpus="${2:?--gpus needs a number}" && shift 2 ;;
		--gpu-type) gpu_type="${2:?--gpu-type needs a value}" && shift 2 ;;
		--python) python="${2:?--python needs an interpreter}" && shift 2 ;;
		--image) images+=("${2:?--image needs an archive}") && shift 2 ;;
		*)
			log "error: unknown argument $1"
			exit 2
			;;
		esac
	done
	[[ "$gpus" =~ ^[0-9]+$ ]] || {
		log "error: --gpus must be a whole number, got '$gpus'"
		exit 2
	}
	[[ "$name" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || {
		log "error: node name '$name' is not a DNS-1123 label"
		exit 2
	}
	[[ -f "$dir/cluster.env" ]] || die "$dir holds no started control plane (no cluster.env)"
	dir="$(cd "$dir" && pwd)"
	cmd_check
	[[ -n "$python" ]] || python="$(command -v python3)"
	local server ca
	server="$(sed -n 's/^SERVER=//p' "$dir/cluster.env")"
	ca="$dir/pki/ca.crt"
	local node
	node="$(node_dir "$dir" "$name")"
	[[ ! -e "$node/index" ]] || die "node $name already exists in $dir"
	mkdir -p "$node"/{logs,pki,containerd,kubelet,device-plugins,cni/net.d,cni/ipam,pod-logs,volume-plugins}
	START_NODE="$name"
	START_DIR="$dir"
	trap on_start_exit EXIT
	local t0=$SECONDS

	host_lock
	local index
	index="$(free_index)"
	printf '%s\n' "$index" >"$node/index"
	host_register "$index" "$node"
	local ip="10.250.0.$index" bridge="walras-node$index" cni_bridge="walras-cni$index"
	ip link add "$bridge" type bridge
	ip addr add "$ip/32" dev "$bridge"
	ip link set "$bridge" up
	local cg
	for cg in $(cgroup_hierarchies); do
		mkdir -p "$cg/walras-node$index"
		# A new cpuset cgroup starts with no CPUs and no memory nodes; give it its parent's.
		if [[ -f "$cg/cpuset.cpus" ]]; then
			cat "$cg/cpuset.cpus" >"$cg/walras-node$index/cpuset.cpus"
			cat "$cg/cpuset.mems" >"$cg/walras-node$index/cpuset.mems"
		fi
	done
	mkdir -p /var/lib/kubelet/device-plugins
	ensure_api_proxy "$dir" "$python" "$server"
	host_unlock

	# Client certificate of the node.
	client_cert "$node/pki/kubelet-client" "$ca" "$dir/pki/ca.key" \
		"/O=system:nodes/CN=system:node:$name" 365
	chmod 0600 "$node/pki/kubelet-client.key"
	write_kubeconfig "$node/kubelet.kubeconfig" "$server" "$ca" "system:node:$name" "" \
		"client-certificate=$node/pki/kubelet-client.crt" "client-key=$node/pki/kubelet-client.key"

	# containerd: overlayfs where the kernel mounts it, the native (copying) snapshotter otherwise.
	local snapshotter=native probe
	probe="$(mktemp -d "$node/.overlay-probe.XXXXXX")"
	mkdir -p "$probe"/{l,u,w,m}
	if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" \
		2>/dev/null; then
		umount "$probe/m"
		snapshotter=overlayfs
	fi
	rm -rf "$probe"
	local sock="$node/containerd/containerd.sock"
	cat >"$node/containerd/config.toml" <<EOF
version = 2
root = "$node/containerd/root"
state = "$node/containerd/state"
# Plugins that would write outside the node's directories or probe for absent kernels' features.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  # Pods' network namespaces pinned under the node's state directory, not in /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state of the node's containers, not in the machine-wide /run/containerd/runc.
        Root = "$node/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$node/cni/net.d"
EOF
	cat >"$node/cni/net.d/10-walras.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "walras-$index",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$cni_bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.251.$index.0/24"}]],
        "routes": [{"dst": "10.96.0.0/16"}, {"dst": "10.250.0.0/24"}, {"dst": "10.251.0.0/16"}],
        "dataDir": "$node/cni/ipam"
      }
    }
  ]
}
EOF

	# containerd in a mount namespace of the node's own (see the header); unshare and the shell
	# exec, so the recorded PID is containerd's.
	unshare --mount --propagation private -- bash -c \
		'mount --bind "$1" /var/lib/kubelet/device-plugins && exec containerd --config "$2"' \
		bash "$node/device-plugins" "$node/containerd/config.toml" \
		</dev/null >"$node/logs/containerd.log" 2>&1 &
	local cpid=$!
	echo "$cpid" >"$node/containerd.pid"
	local i
	for ((i = 0; i < 200; i++)); do
		[[ -S "$sock" ]] && ctr --address "$sock" version >/dev/null 2>&1 && break
		pid_alive "$cpid" || die "containerd exited at start"
		sleep 0.1
	done
	[[ -S "$sock" ]] || die "containerd did not open $sock within 20 s"
	log "$name: containerd up at $((SECONDS - t0)) s ($snapshotter)"
	local archive
	for archive in "$PAUSE_TAR" "${images[@]}"; do
		ctr --address "$sock" -n k8s.io images import "$archive" >/dev/null ||
			die "ctr images import $archive failed"
	done
	log "$name: $((${#images[@]} + 1)) image(s) imported at $((SECONDS - t0)) s"

	cat >"$node/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 (this machine), cgroupfs like containerd (SystemdCgroup = false), own cgroup root.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /walras-node$index
containerRuntimeEndpoint: unix://$sock
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $ca
authorization:
  mode: Webhook
# No kube-proxy reads them; and they would outlive the node.
makeIPTablesUtilChains: false
failSwapOn: false
# Paths that default to the host's own directories.
podLogsDir: $node/pod-logs
volumePluginDir: $node/volume-plugins
# A shared, fullish disk must not make the node evict the test's pods, nor collect its images
# (nothing could pull them again).
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
	nsenter --mount="/proc/$cpid/ns/mnt" -- "$KUBELET_BIN" \
		--config="$node/kubelet.yaml" \
		--kubeconfig="$node/kubelet.kubeconfig" \
		--root-dir="$node/kubelet" \
		--cert-dir="$node/kubelet/pki" \
		--hostname-override="$name" \
		--node-ip="$ip" \
		--node-labels="$GPU_TYPE_LABEL=$gpu_type,$REAL_NODE_LABEL=true" \
		--v="${WALRAS_KUBELET_VERBOSITY:-1}" \
		</dev/null >"$node/logs/kubelet.log" 2>&1 &
	echo $! >"$node/kubelet.pid"

	# Fake GPUs: the device plugin registers with the kubelet once its socket appears.
	if ((gpus > 0)); then
		PYTHONPATH="$HACK_DIR/../src${PYTHONPATH:+:$PYTHONPATH}" "$python" -m walras.testing.deviceplugin \
			--dir "$node/device-plugins" --count "$gpus" --prefix "$name-gpu" \
			</dev/null >"$node/logs/deviceplugin.log" 2>&1 &
		echo $! >"$node/deviceplugin.pid"
	fi

	# Ready: the kubelet's node is Ready and (with GPUs) allocatable holds them.
	local kubeconfig="$dir/admin.kubeconfig" token
	token="$(sed -n 's/^[[:space:]]*token: //p' "$kubeconfig")"
	local deadline=$((SECONDS + ${WALRAS_NODE_READY_TIMEOUT:-60})) ready=0 body
	while ((SECONDS < deadline)); do
		pid_alive "$(cat "$node/kubelet.pid")" || die "kubelet exited at start"
		if [[ -f "$node/deviceplugin.pid" ]]; then
			pid_alive "$(cat "$node/deviceplugin.pid")" || die "the device plugin exited at start"
		fi
		body="$(curl --silent --fail --max-time 2 --cacert "$ca" -H "Authorization: Bearer $token" \
			"$server/api/v1/nodes/$name" 2>/dev/null || true)"
		if [[ -n "$body" ]] && printf '%s' "$body" | "$python" -c '
import json, sys
node = json.load(sys.stdin)
want = int(sys.argv[1])
ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
gpus = int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
sys.exit(0 if ready and gpus == want else 1)
' "$gpus"; then
			ready=1
			break
		fi
		sleep 0.2
	done
	((ready)) || die "node $name not Ready with $gpus nvidia.com/gpu after ${WALRAS_NODE_READY_TIMEOUT:-60} s"
	cat >"$node/node.env" <<EOF
NAME=$name
INDEX=$index
NODE_IP=$ip
CONTAINERD_SOCKET=$sock
KUBELET_PID=$(cat "$node/kubelet.pid")
CONTAINERD_PID=$cpid
DEVICEPLUGIN_PID=$(cat "$node/deviceplugin.pid" 2>/dev/null || true)
GPUS=$gpus
GPU_TYPE=$gpu_type
EOF
	START_OK=1
	log "$name Ready in $((SECONDS - t0)) s at $ip with $gpus nvidia.com/gpu ($gpu_type)"
}

# ---------------------------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------------------------

# SIGTERM, up to WAIT tenths of a second, then SIGKILL; by recorded PID, and only while that PID
# still runs a command line holding NEEDLE (the kernel may have reused it).
stop_pid() {
	local pid="$1" needle="$2" wait="${3:-100}"
	pid_alive "$pid" || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$needle" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < wait; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
}

# PIDs of this node's containerd shims: their command line names the node's own socket.
shim_pids() {
	local sock="$1" p
	for p in /proc/[0-9]*; do
		[[ -r "$p/cmdline" ]] || continue
		local cmdline
		cmdline="$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" || continue
		if [[ "$cmdline" == *containerd-shim* && "$cmdline" == *"-address $sock "* ]]; then
			printf '%s\n' "${p#/proc/}"
		fi
	done
}

cmd_stop() {
	local dir="${1:-}" name="${2:-}"
	[[ -n "$dir" && -n "$name" ]] || usage
	dir="$(cd "$dir" && pwd)"
	local node
	node="$(node_dir "$dir" "$name")"
	[[ -d "$node" ]] || {
		log "no node $name in $dir"
		return 0
	}
	local sock="$node/containerd/containerd.sock"
	[[ -f "$node/deviceplugin.pid" ]] && stop_pid "$(cat "$node/deviceplugin.pid")" walras.testing.deviceplugin
	[[ -f "$node/kubelet.pid" ]] && stop_pid "$(cat "$node/kubelet.pid")" "$KUBELET_BIN"
	# The containers: killed through their runtime (no kubelet is left to stop them gracefully).
	if [[ -f "$node/containerd.pid" ]] && pid_alive "$(cat "$node/containerd.pid")" && [[ -S "$sock" ]]; then
		local id
		for id in $(ctr --address "$sock" -n k8s.io tasks list -q 2>/dev/null); do
			ctr --address "$sock" -n k8s.io tasks kill --signal SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr --address "$sock" -n k8s.io tasks list -q 2>/dev/null); do
			ctr --address "$sock" -n k8s.io tasks delete --force "$id" >/dev/null 2>&1 || true
		done
		stop_pid "$(cat "$node/containerd.pid")" "containerd --config $node/containerd/config.toml"
	fi
	local pid
	for pid in $(shim_pids "$sock"); do
		stop_pid "$pid" "$sock" 20
	done
	rm -f "$node"/*.pid

	local index=""
	[[ -f "$node/index" ]] && index="$(cat "$node/index")"
	if [[ -n "$index" ]]; then
		host_lock
		ip link del "walras-node$index" 2>/dev/null || true
		ip link del "walras-cni$index" 2>/dev/null || true
		rm -f /var/lib/cni/results/"walras-$index"-* 2>/dev/null || true
		# The kubelet's pod log links point into the node's directory.
		if [[ -d /var/log/containers ]]; then
			find /var/log/containers -maxdepth 1 -type l -lname "$node/*" -delete 2>/dev/null || true
		fi
		local cg
		for cg in $(cgroup_hierarchies); do
			[[ -d "$cg/walras-node$index" ]] &&
				find "$cg/walras-node$index" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		done
		host_unregister "$index"
		host_unlock
	fi
	rm -rf "$node"
	host_lock
	release_api_proxy "$dir"
	host_unlock
	rmdir "$dir/nodes" 2>/dev/null || true
	log "stopped node $name"
}

cmd_stop_all() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || usage
	[[ -d "$dir/nodes" ]] || return 0
	local node
	for node in "$dir"/nodes/*/; do
		[[ -d "$node" ]] || continue
		cmd_stop "$dir" "$(basename "$node")"
	done
}

cmd_containers() {
	local dir="${1:-}" name="${2:-}"
	[[ -n "$dir" && -n "$name" ]] || usage
	local sock
	sock="$(node_dir "$dir" "$name")/containerd/containerd.sock"
	[[ -S "$sock" ]] || die "node $name in $dir has no running containerd"
	ctr --address "$sock" -n k8s.io containers list
}

main() {
	local cmd="${1:-}"
	shift || true
	case "$cmd" in
	build) cmd_build ;;
	build-pause) build_pause ;;
	build-tools) cmd_build_tools ;;
	check) cmd_check ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	stop-all) cmd_stop_all "$@" ;;
	containers) cmd_containers "$@" ;;
	*) usage ;;
	esac
}

main "$@"
