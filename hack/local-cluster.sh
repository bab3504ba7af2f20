#!/usr/bin/env bash
# A real Kubernetes cluster of one or more nodes on this machine, the stand-in for kind (which
# needs a Docker engine): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# kube-proxy, and per node a containerd and a kubelet, run as plain processes on Debian's
# containerd, runc and CNI plugins. There is no registry: images are tars built by
# hack/images/build.sh and imported into every node with hack/images/import.sh; pods use them
# with imagePullPolicy: Never.
#
#   hack/local-cluster.sh up           start and wait until every node is Ready (idempotent)
#   hack/local-cluster.sh down         stop everything and restore the host (idempotent)
#   hack/local-cluster.sh purge        down, then delete the state directory
#   hack/local-cluster.sh status       components with pid and RSS; exit 0 only when all run
#   hack/local-cluster.sh env          exports for kubectl and ctr: eval "$(hack/local-cluster.sh env)"
#   hack/local-cluster.sh kubeconfig   path of the admin kubeconfig
#   hack/local-cluster.sh logs [N]     last N (default 40) lines of every component's log
#   hack/local-cluster.sh node-stop NODE   fail one node: SIGKILL its kubelet, its pods'
#                                      processes, its containerd and shims (the Node turns
#                                      NotReady once the node controller's grace period passes)
#   hack/local-cluster.sh node-start NODE  start that node's containerd and kubelet again and
#                                      wait until it is Ready
#
# Needs root. Everything the cluster writes lives in the state directory, except what `down`
# undoes: one bridge per node (cacheqos1, cacheqos2, ...) carrying the node's address (pods and
# Services use private ranges that never leave the machine: no masquerading), a route to the
# Service range, a FORWARD rule accepting traffic between the pods' ranges, a few sysctls (saved,
# then restored), KUBE-* iptables chains from kubelet and kube-proxy, a cgroup subtree per node,
# and a few files under paths containerd 1.6, libcni and kubelet hard-code. One cluster per
# machine: /run/cacheqos-local-cluster names the state directory that owns it.
#
# Settings (environment):
#   CACHEQOS_CLUSTER_DIR           state directory (default $HOME/.cache/cacheqos/local-cluster)
#   CACHEQOS_KUBE_BIN              folder with the kube binaries (default bin/kube, from
#                                  `hack/bootstrap.sh kube`)
#   CACHEQOS_ETCD                  etcd binary (default bin/etcd/etcd, `hack/bootstrap.sh etcd`)
#   CACHEQOS_CLUSTER_NODES         number of nodes, 1 to 16 (1; the e2e suite uses 3), fixed
#                                  when `up` creates the state directory: the other commands
#                                  take it from there, and another number needs a purge
#   CACHEQOS_CLUSTER_POD_CIDR      the first node's pod range, a /24; node k takes the k-th /24
#                                  from there (10.247.0.0/24, 10.247.1.0/24, ...); the .1 of a
#                                  node's range is the node's address (10.247.0.0/24)
#   CACHEQOS_CLUSTER_SERVICE_CIDR  Service range, a /24 outside the nodes' (10.247.255.0/24)
#   CACHEQOS_CLUSTER_TIMEOUT       seconds `up` waits for the cluster to be ready (180)
#
# Nodes. Node k is cacheqos-node-k: its own containerd (root, state, socket and runc root under
# nodes/<node>/containerd: two kubelets sharing one containerd namespace would each collect the
# other's containers), its own kubelet (root directory, certificate, node IP and cgroup subtree
# /<node>; its ports are the same on every node, bound to the node's own address), its own CNI
# configuration, bridge cacheqosk and pod range. All bridges live in the host's network
# namespace, so the host routes between the pod ranges by itself (each bridge's range is a
# connected route; forwarding is on). What the nodes share, because they share one kernel:
#   - one kube-proxy, for all: the nodes share one network namespace and so one set of
#     iptables rules, which several kube-proxies would rewrite in turn. It runs as node 1, so
#     internalTrafficPolicy/externalTrafficPolicy Local count only node 1's endpoints as local,
#     and NodePorts answer on node 1's address only;
#   - /var/lib/kubelet/device-plugins, which kubelet 1.31 hard-codes: each kubelet empties it at
#     start and listens on kubelet.sock there, so the last one started owns the socket, and they
#     share its checkpoint file. No device plugin runs on this cluster; do not add one;
#   - the machine's memory and CPU: every node reports all of it as its capacity, and each
#     kubelet's eviction thresholds look at the whole machine;
#   - the host's network stack: there is no network between nodes to cut, delay or drop; a
#     node "fails" only by its processes stopping.
# It is not a model of separate machines: no per-node kernel, clock, disk or network faults.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
state=${CACHEQOS_CLUSTER_DIR:-$HOME/.cache/cacheqos/local-cluster}
[[ $state == /* ]] || state=$PWD/$state
kube_bin=${CACHEQOS_KUBE_BIN:-$repo/bin/kube}
etcd_bin=${CACHEQOS_ETCD:-$repo/bin/etcd/etcd}
pod_cidr=${CACHEQOS_CLUSTER_POD_CIDR:-10.247.0.0/24}
service_cidr=${CACHEQOS_CLUSTER_SERVICE_CIDR:-10.247.255.0/24}
up_timeout=${CACHEQOS_CLUSTER_TIMEOUT:-180}

# Host-wide names.
owner_file=/run/cacheqos-local-cluster
cni_network=cacheqos
node_label=cacheqos.io/local-cluster=true

# Ports. The API server and kube-proxy listen on node 1's address, each kubelet on its node's;
# those addresses exist only on our bridges. etcd and the controllers listen on loopback. None
# is a default port, so a cluster someone else runs on this machine does not collide.
api_port=16443
etcd_port=12379
etcd_peer_port=12380
controller_manager_port=10357
scheduler_port=10359
kubelet_port=10350
kubelet_healthz_port=10348
proxy_healthz_port=10356
proxy_metrics_port=10349

pki=$state/pki
logs=$state/logs
run=$state/run
image_dir=$state/images
admin_kubeconfig=$state/kubeconfig
sandbox_image=localhost/cacheqos/pause:local

kube_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

# Sysctls the cluster changes: forwarding and bridge netfilter for Service traffic, and the
# ones kubelet rewrites at start (it does not restore them).
host_sysctls=(
  net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
)
# Paths containerd 1.6, libcni, kubelet and libmount (its table of kubelet's mounts) use
# whatever their configuration says. `down` removes our files there, then the directories that
# did not exist before `up`.
hard_coded_dirs=(
  /var/lib/cni/results /var/lib/cni /var/lib/kubelet/device-plugins /var/lib/kubelet
  /var/log/containers /run/containerd/s /run/containerd/fifo /run/containerd /run/mount
)

log() { printf '[local-cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }
kc() { "$kube_bin/kubectl" --kubeconfig "$admin_kubeconfig" --request-timeout 10s "$@"; }
ctr_k8s() { ctr --address "$containerd_sock" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------------------------------------
# Checks

# net24 CIDR: the first three octets of a /24 ("10.247.0" for 10.247.0.0/24), or an error.
net24() {
  [[ $1 =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})\.0/24$ ]] ||
    die "'$1' is not a /24 range like 10.247.0.0/24 (CACHEQOS_CLUSTER_POD_CIDR / CACHEQOS_CLUSTER_SERVICE_CIDR)"
  echo "${BASH_REMATCH[1]}"
}
[[ $state != *[[:space:]]* ]] || die "the state directory '$state' must not contain white space"
[[ $up_timeout =~ ^[0-9]+$ ]] || die "CACHEQOS_CLUSTER_TIMEOUT='$up_timeout' is not a number of seconds"

# The number of nodes: what the state directory was created with, else the setting (`up`
# refuses a setting that differs from the state directory's: check_settings).
requested_nodes=${CACHEQOS_CLUSTER_NODES:-}
[ -z "$requested_nodes" ] || { [[ $requested_nodes =~ ^[0-9]+$ ]] && ((requested_nodes >= 1 && requested_nodes <= 16)); } ||
  die "CACHEQOS_CLUSTER_NODES='$requested_nodes' is not a number of nodes from 1 to 16"
recorded_nodes=$(sed -n 's/.* nodes=\([0-9]*\).*/\1/p' "$state/settings" 2>/dev/null || true)
node_count=${recorded_nodes:-${requested_nodes:-1}}

# Address plan: node k's pod range is the k-th /24 from the first node's; the Service range
# must lie outside all of them.
pod_prefix=$(net24 "$pod_cidr")
first_octet3=${pod_prefix##*.}
pod_net16=${pod_prefix%.*}
((first_octet3 + node_count - 1 <= 255)) ||
  die "$node_count nodes do not fit after $pod_cidr: node k takes the k-th /24 from there"
service_prefix=$(net24 "$service_cidr")
if [ "${service_prefix%.*}" = "$pod_net16" ] && ((${service_prefix##*.} >= first_octet3 && ${service_prefix##*.} < first_octet3 + node_count)); then
  die "the Service range $service_cidr overlaps the pod ranges of the $node_count nodes from $pod_cidr"
fi
apiserver_service_ip=$service_prefix.1

# cluster_cidr: the smallest range holding every node's pod range, kube-proxy's clusterCIDR
# (traffic from it to a Service is not masqueraded).
cluster_cidr() {
  local bits=0 mask
  while (((first_octet3 >> bits) != ((first_octet3 + node_count - 1) >> bits))); do
    bits=$((bits + 1))
  done
  mask=$(((first_octet3 >> bits) << bits))
  echo "$pod_net16.$mask.0/$((24 - bits))"
}

node_name() { echo "cacheqos-node-$1"; }
node_ip_of() { echo "$pod_net16.$((first_octet3 + $1 - 1)).1"; }
node_indexes() { seq 1 "$node_count"; }
api_ip=$(node_ip_of 1) # the API server and kube-proxy listen on node 1's address

# select_node K: the names and paths of node K, in globals the per-node functions use.
select_node() {
  node=$(node_name "$1")
  node_ip=$(node_ip_of "$1")
  node_pod_cidr=$pod_net16.$((first_octet3 + $1 - 1)).0/24
  bridge=cacheqos$1
  cgroup_root=/$node # kubelet's cgroupRoot: pods live in <hierarchy>/<node>/kubepods
  node_dir=$state/nodes/$node
  containerd_dir=$node_dir/containerd
  containerd_sock=$containerd_dir/containerd.sock
  kubelet_dir=$node_dir/kubelet
  cni_dir=$node_dir/cni
}

# Components: the control plane and kube-proxy, then containerd and kubelet per node, named
# "containerd.<node>" and "kubelet.<node>".
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
for k in $(node_indexes); do
  components+=("containerd.$(node_name "$k")" "kubelet.$(node_name "$k")")
done

require_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root: it creates a bridge, changes sysctls and iptables, and runs kubelet"
}

cni_bin_dir() {
  local d
  for d in /usr/lib/cni /opt/cni/bin; do
    [ -x "$d/bridge" ] && [ -x "$d/host-local" ] && { echo "$d"; return; }
  done
  return 1
}

preflight() {
  require_root
  local missing=() b
  for b in "${kube_binaries[@]}"; do
    [ -x "$kube_bin/$b" ] || missing+=("$b")
  done
  [ -x "$etcd_bin" ] || missing+=(etcd)
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]} (looked in $kube_bin and $etcd_bin): run hack/bootstrap.sh kube etcd"
  missing=()
  for b in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables conntrack ip openssl flock setsid base64; do
    command -v "$b" >/dev/null || missing+=("$b")
  done
  cni_bin_dir >/dev/null || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: run hack/bootstrap.sh apt (openssl: apt-get install openssl)"
}

# The settings a state directory was created with; changing them needs a purge, because
# certificates and stored objects carry the addresses.
check_settings() {
  local settings="pod_cidr=$pod_cidr service_cidr=$service_cidr nodes=${requested_nodes:-$node_count}"
  if [ -f "$state/settings" ]; then
    [ "$(cat "$state/settings")" = "$settings" ] ||
      die "$state was created with '$(cat "$state/settings")', not '$settings': run hack/local-cluster.sh purge first"
  else
    echo "$settings" >"$state/settings"
  fi
}

# lock: serialises the commands that change things, per state directory. Started daemons must
# not inherit the lock's descriptor (start_component closes it).
lock() {
  mkdir -p "$state" "$logs" "$run"
  exec 9>"$state/.lock"
  flock -w 300 9 || die "another hack/local-cluster.sh holds $state/.lock"
  check_layout
}

owner() { cat "$owner_file" 2>/dev/null || true; }

# check_layout refuses a state directory of the one-node script this one replaced (its pid
# files had no node in their names): this script would not find those processes to stop them.
check_layout() {
  [ ! -f "$run/kubelet.pid" ] && [ ! -f "$run/containerd.pid" ] ||
    die "$state holds a cluster of the one-node hack/local-cluster.sh (before CACHEQOS_CLUSTER_NODES): purge it with that version of the script, run from this repository's hack folder (git show <commit>:hack/local-cluster.sh >hack/old-cluster.sh; bash hack/old-cluster.sh purge)"
}

# check_host refuses when another state directory's cluster owns this machine.
check_host() {
  local other
  other=$(owner)
  if [ -n "$other" ] && [ "$other" != "$state" ] && [ -d "$other" ]; then
    die "another local cluster owns this machine (state directory $other); stop it first: CACHEQOS_CLUSTER_DIR=$other hack/local-cluster.sh down"
  fi
  local k
  for k in $(node_indexes); do
    select_node "$k"
    if [ -z "$other" ] && ip link show "$bridge" >/dev/null 2>&1; then
      die "a network device named $bridge exists but no local cluster owns it; remove it (ip link del $bridge) or find who made it"
    fi
  done
}

# claim_host makes this state directory the machine's cluster.
claim_host() {
  local other
  other=$(owner)
  [ -z "$other" ] || [ "$other" = "$state" ] || log "the cluster of $other vanished without 'down'; taking over"
  echo "$state" >"$owner_file"
}

# ---------------------------------------------------------------------------------------------
# Processes: one pid file per component, "PID BINARY"; a pid counts only while it still runs
# that binary, so a recycled pid is never signalled.

# binary_of COMPONENT: the program of a component; node components are "<program>.<node>".
binary_of() {
  local program=${1%%.*}
  case $program in
    containerd) readlink -f "$(command -v containerd)" ;;
    etcd) readlink -f "$etcd_bin" ;;
    *) readlink -f "$kube_bin/$program" ;;
  esac
}

pid_of() {
  local pid bin
  [ -f "$run/$1.pid" ] || return 1
  read -r pid bin <"$run/$1.pid"
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ] || return 1
  echo "$pid"
}

running() { pid_of "$1" >/dev/null; }

alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# start_component NAME ARGS...: runs NAME's binary in its own session (a Ctrl-C of the caller
# does not reach it), logging to logs/NAME.log.
start_component() {
  local name=$1 bin pid i
  shift
  bin=$(binary_of "$name")
  setsid "$bin" "$@" </dev/null >"$logs/$name.log" 2>&1 9>&- &
  pid=$!
  echo "$pid $bin" >"$run/$name.pid"
  # setsid execs the binary in place; wait until it has, so pid_of sees the real program.
  for ((i = 0; i < 50; i++)); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ] && break
    alive "$pid" || break
    sleep 0.02
  done
  log "started $name (pid $pid)"
}

# terminate PID...: SIGTERM, up to 10 s of grace, then SIGKILL.
terminate() {
  local pid i left
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    left=0
    for pid; do
      alive "$pid" && left=1
    done
    [ $left = 1 ] || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

stop_component() {
  local pid
  if pid=$(pid_of "$1"); then
    terminate "$pid"
    log "stopped $1"
  fi
  rm -f "$run/$1.pid"
}

# Shims of our containerds outlive them by design; find them by the address they were given.
our_shims() {
  local p cmdline
  for p in /proc/[0-9]*; do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $cmdline == *containerd-shim*" -address $state/nodes/"*"/containerd/containerd.sock "* ]] && echo "${p#/proc/}"
  done
  return 0
}

cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts; }

cgroup_v2() { [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; }

# Processes of our pods: everything in the nodes' cgroup subtrees.
pod_processes() {
  local k
  for k in $(node_indexes); do
    select_node "$k"
    node_pod_processes
  done | sort -un
}

# node_pod_processes: the processes in the selected node's cgroup subtree.
node_pod_processes() {
  local mp
  for mp in $(cgroup_mounts); do
    [ -d "$mp$cgroup_root" ] || continue
    find "$mp$cgroup_root" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done
}

# ---------------------------------------------------------------------------------------------
# Files: certificates, kubeconfigs, component configurations

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# signed_cert DIR NAME SUBJECT USAGE [SAN]: an ECDSA key and a certificate signed by DIR/ca.
signed_cert() {
  local dir=$1 name=$2 subject=$3 usage=$4 san=${5:-}
  new_key "$dir/$name.key"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$usage"
    [ -z "$san" ] || echo "subjectAltName=$san"
  } >"$dir/$name.ext"
  openssl req -new -key "$dir/$name.key" -subj "$subject" |
    openssl x509 -req -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 3650 -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.ext"
}

write_pki() {
  [ -f "$pki/ca.crt" ] && return 0
  local tmp=$pki.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  new_key "$tmp/ca.key"
  openssl req -x509 -new -key "$tmp/ca.key" -subj "/CN=cacheqos-local-cluster-ca" -days 3650 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -out "$tmp/ca.crt" 2>/dev/null
  signed_cert "$tmp" apiserver /CN=kube-apiserver serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$api_ip,IP:$apiserver_service_ip"
  signed_cert "$tmp" admin /O=system:masters/CN=cacheqos-admin clientAuth
  signed_cert "$tmp" apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
  signed_cert "$tmp" kube-controller-manager /CN=system:kube-controller-manager clientAuth
  signed_cert "$tmp" kube-scheduler /CN=system:kube-scheduler clientAuth
  signed_cert "$tmp" kube-proxy /CN=system:kube-proxy clientAuth
  local k
  for k in $(node_indexes); do
    # Each kubelet its own identity: NodeRestriction lets it write only its own Node and pods.
    signed_cert "$tmp" "kubelet-$(node_name "$k")" "/O=system:nodes/CN=system:node:$(node_name "$k")" clientAuth
  done
  new_key "$tmp/service-account.key"
  openssl pkey -in "$tmp/service-account.key" -pubout -out "$tmp/service-account.pub"
  mv "$tmp" "$pki"
}

# write_kubeconfig FILE CERT: a self-contained kubeconfig for the client certificate CERT.
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cacheqos-local
  cluster:
    server: https://$api_ip:$api_port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: cacheqos-local
  context: {cluster: cacheqos-local, user: $2}
current-context: cacheqos-local
EOF
}

write_configs() {
  local c k
  mkdir -p "$state/kubeconfigs"
  write_kubeconfig "$admin_kubeconfig" admin
  for c in kube-controller-manager kube-scheduler kube-proxy; do
    write_kubeconfig "$state/kubeconfigs/$c" "$c"
  done
  for k in $(node_indexes); do
    select_node "$k"
    write_node_configs
  done

  # One kube-proxy for every node: they share the host's network namespace (see the header).
  # conntrack zeros and localhostNodePorts false: kube-proxy leaves those host sysctls alone.
  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/kubeconfigs/kube-proxy}
hostnameOverride: $(node_name 1)
mode: iptables
clusterCIDR: $(cluster_cidr)
healthzBindAddress: $api_ip:$proxy_healthz_port
metricsBindAddress: $api_ip:$proxy_metrics_port
nodePortAddresses: ["$api_ip/32"]
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}

# write_node_configs: containerd, CNI and kubelet configuration of the selected node.
write_node_configs() {
  local snapshotter=overlayfs
  mkdir -p "$containerd_dir" "$kubelet_dir" "$cni_dir/net.d" "$cni_dir/ipam" "$node_dir/pod-logs"
  write_kubeconfig "$state/kubeconfigs/kubelet-$node" "kubelet-$node"
  # overlayfs cannot stack on overlayfs (a state directory inside a container).
  [ "$(stat -fc %T "$state")" != overlayfs ] || snapshotter=native

  cat >"$containerd_dir/config.toml" <<EOF
version = 2
root = "$containerd_dir/root"
state = "$containerd_dir/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$containerd_sock"
[ttrpc]
  address = "$containerd_sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$containerd_dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox_image"
  netns_mounts_under_state_dir = true
  # Root may lack CAP_SYS_RESOURCE (it does in some VMs): then runc cannot lower a sandbox's
  # oom_score_adj to -998 and every RunPodSandbox fails with "can't get final child's PID
  # from pipe: EOF". Restricting the adjustment to what the daemon has avoids that.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$containerd_dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$(cni_bin_dir)"
    conf_dir = "$cni_dir/net.d"
    max_conf_num = 1
EOF

  cat >"$cni_dir/net.d/10-$cni_network.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$cni_network",
  "plugins": [
    {
      "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$cni_dir/ipam",
        "ranges": [[{"subnet": "$node_pod_cidr", "gateway": "$node_ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF

  # oomScoreAdj 0: the default -999 needs CAP_SYS_RESOURCE, which root may lack.
  # imageGCHighThresholdPercent 100: images cannot be pulled again, so never collect them.
  cat >"$kubelet_dir/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
healthzBindAddress: $node_ip
healthzPort: $kubelet_healthz_port
readOnlyPort: 0
containerRuntimeEndpoint: unix://$containerd_sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
oomScoreAdj: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $node_dir/pod-logs
volumePluginDir: $kubelet_dir/volume-plugins
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
syncFrequency: 10s
nodeStatusReportFrequency: 10s
EOF
}

# ---------------------------------------------------------------------------------------------
# Host changes and their undoing

sysctl_file() { echo "/proc/sys/${1//.//}"; }

save_sysctls() {
  [ -f "$run/sysctls.saved" ] && return 0
  local k
  for k in "${host_sysctls[@]}"; do
    [ -f "$(sysctl_file "$k")" ] && echo "$k $(cat "$(sysctl_file "$k")")"
  done >"$run/sysctls.tmp"
  mv "$run/sysctls.tmp" "$run/sysctls.saved"
}

restore_sysctls() {
  [ -f "$run/sysctls.saved" ] || return 0
  local k v f
  while read -r k v; do
    f=$(sysctl_file "$k")
    [ "$(cat "$f")" = "$v" ] || echo "$v" >"$f" || log "could not restore $k=$v"
  done <"$run/sysctls.saved"
  rm -f "$run/sysctls.saved"
}

# forward_rule: the FORWARD rule that lets pods of any node reach pods of any other (a host
# whose FORWARD policy is DROP would otherwise drop traffic between the bridges).
forward_rule() {
  echo FORWARD -s "$(cluster_cidr)" -d "$(cluster_cidr)" -m comment --comment cacheqos-local-cluster-between-pods -j ACCEPT
}

setup_network() {
  local k
  for k in $(node_indexes); do
    select_node "$k"
    ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
    ip addr show dev "$bridge" | grep -q "inet $node_ip/" || ip addr add "$node_ip/24" dev "$bridge"
    ip link set "$bridge" up
  done
  # The host reaches Services from node 1's address, whatever its default route is.
  ip route replace "$service_cidr" dev cacheqos1 src "$api_ip"
  echo 1 >"$(sysctl_file net.ipv4.ip_forward)"
  # shellcheck disable=SC2046
  iptables -w -C $(forward_rule) 2>/dev/null || iptables -w -I $(forward_rule)
  local f
  f=$(sysctl_file net.bridge.bridge-nf-call-iptables)
  if [ -f "$f" ]; then
    echo 1 >"$f"
  else
    log "br_netfilter is not loaded: a pod reaching a Service backed by a pod of the same node may fail"
  fi
}

# record_hard_coded_dirs notes which of those directories existed before the first `up`.
record_hard_coded_dirs() {
  [ -f "$run/preexisting-dirs" ] && return 0
  local d
  for d in "${hard_coded_dirs[@]}"; do
    [ -e "$d" ] && echo "$d"
  done >"$run/preexisting-dirs"
  return 0
}

# On cgroup v2, kubelet needs the controllers enabled for the subtree it is given.
cgroup2_controllers=(cpuset cpu io memory hugetlb pids)

setup_cgroups() {
  local mp c k
  for k in $(node_indexes); do
    select_node "$k"
    for mp in $(cgroup_mounts); do
      mkdir -p "$mp$cgroup_root"
    done
  done
  cgroup_v2 || return 0
  [ -f "$run/cgroup2-enabled" ] || : >"$run/cgroup2-enabled"
  for c in "${cgroup2_controllers[@]}"; do
    grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || continue
    grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control && continue
    echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control && echo "$c" >>"$run/cgroup2-enabled"
  done
}

remove_cgroups() {
  local mp pids k
  pids=$(pod_processes)
  if [ -n "$pids" ]; then
    log "killing $(wc -w <<<"$pids") leftover pod processes"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  fi
  for k in $(node_indexes); do
    select_node "$k"
    for mp in $(cgroup_mounts); do
      [ -d "$mp$cgroup_root" ] || continue
      find "$mp$cgroup_root" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ ! -d "$mp$cgroup_root" ] || log "could not remove cgroup $mp$cgroup_root"
    done
  done
  if [ -f "$run/cgroup2-enabled" ]; then
    local c
    while read -r c; do
      echo "-$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || log "cgroup v2 controller $c stays enabled (in use)"
    done <"$run/cgroup2-enabled"
    rm -f "$run/cgroup2-enabled"
  fi
}

# Mount points under the state directory, deepest first.
state_mounts() { awk -v p="$state/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r; }

unmount_state() {
  local m attempt
  for attempt in 1 2 3; do
    [ -n "$(state_mounts)" ] || return 0
    for m in $(state_mounts); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
  [ -z "$(state_mounts)" ] || log "still mounted: $(state_mounts | tr '\n' ' ')"
}

# Remove every KUBE-* chain and the rules jumping to them, in both address families. (This is
# what `kube-proxy --cleanup` does for its own chains, which also takes 15 s probing for IPVS,
# plus the chains kubelet creates.)
clean_iptables() {
  local ipt table rules rule chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle raw; do
      rules=$("$ipt" -w -t "$table" -S 2>/dev/null) || continue
      while read -r rule; do
        # The rule text is iptables' own, with quoted comments: eval re-splits it faithfully.
        eval "\"\$ipt\" -w -t \"\$table\" -D ${rule#-A }" 2>/dev/null || true
      done < <(grep -E '^-A [A-Z]+ .*-j KUBE-' <<<"$rules" | grep -v '^-A KUBE-')
      for chain in $(awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }' <<<"$rules"); do
        "$ipt" -w -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $(awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }' <<<"$rules"); do
        "$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
  remove_new_nft_tables
}

# iptables-nft creates the nftables tables it writes to (ip filter, ip6 nat, ...) and never
# deletes them. Once the chains are gone, delete those that did not exist before `up` and hold
# no rule. Needs nft (Debian nftables); without it the empty tables stay, which changes nothing.
record_nft_tables() {
  [ -f "$run/nft-tables.before" ] && return 0
  if command -v nft >/dev/null; then nft list tables; fi >"$run/nft-tables.before" 2>/dev/null || true
}

remove_new_nft_tables() {
  [ -f "$run/nft-tables.before" ] || return 0
  if command -v nft >/dev/null; then
    local kind family name
    while read -r kind family name; do
      [ "$kind" = table ] || continue
      grep -qxF "table $family $name" "$run/nft-tables.before" && continue
      # A table whose listing has only table/chain headers, hook lines and braces holds no rule.
      nft list table "$family" "$name" 2>/dev/null | grep -qvE '^[[:space:]]*(table |chain |type |\}|$)' ||
        nft delete table "$family" "$name" 2>/dev/null || true
    done < <(nft list tables 2>/dev/null)
  fi
  rm -f "$run/nft-tables.before"
}

# Our files under the hard-coded paths, then those directories unless they predate us.
clean_hard_coded_dirs() {
  local id f d
  if [ -f "$run/container-ids" ]; then
    while read -r id; do
      rm -f /var/lib/cni/results/"$cni_network-$id"-* /var/lib/cni/results/cni-loopback-"$id"-*
    done <"$run/container-ids"
    rm -f "$run/container-ids"
  fi
  for f in /var/log/containers/*.log; do
    [[ -L $f && $(readlink "$f") == "$state/nodes/"* ]] && rm -f "$f"
  done
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  # The kubelets' shared device-manager checkpoint, unless a kubelet of the host was there first.
  grep -qxF /var/lib/kubelet/device-plugins "$run/preexisting-dirs" 2>/dev/null ||
    rm -f /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  [ -f "$run/preexisting-dirs" ] || return 0
  for d in "${hard_coded_dirs[@]}"; do
    grep -qxF "$d" "$run/preexisting-dirs" || rmdir "$d" 2>/dev/null || true
  done
  rm -f "$run/preexisting-dirs"
}

# kill_pods removes every container of the selected node's containerd, recording the ids for
# libcni's cache.
kill_pods() {
  running "containerd.$node" || return 0
  local ids id
  ids=$(ctr_k8s containers ls -q 2>/dev/null || true)
  [ -n "$ids" ] || return 0
  echo "$ids" >>"$run/container-ids"
  for id in $ids; do
    ctr_k8s tasks rm -f "$id" >/dev/null 2>&1 || true
    ctr_k8s containers rm "$id" >/dev/null 2>&1 || true
  done
  log "removed $(wc -w <<<"$ids") containers"
}

# teardown stops every process of the cluster (found through its pid files and containerd
# socket); with "host" it also removes the pods' cgroups and undoes the host changes, which
# must not happen while another state directory's cluster owns the machine.
# Best effort, in a subshell without errexit: one failing step must not stop the others.
teardown() (
  set +e
  local restore_host=$1 c k
  for k in $(node_indexes); do
    stop_component "kubelet.$(node_name "$k")" # first, so nothing restarts the pods
  done
  for k in $(node_indexes); do
    select_node "$k"
    kill_pods
  done
  stop_component kube-proxy
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_component "$c"
  done
  for k in $(node_indexes); do
    stop_component "containerd.$(node_name "$k")"
  done
  # shellcheck disable=SC2046
  terminate $(our_shims)
  unmount_state
  [ "$restore_host" = host ] || return 0
  remove_cgroups
  unmount_state # the pods' last mounts, released by the processes remove_cgroups killed
  clean_iptables
  # shellcheck disable=SC2046
  while iptables -w -D $(forward_rule) 2>/dev/null; do :; done
  for k in $(node_indexes); do
    select_node "$k"
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "$cni_dir/ipam" # leases of pods that no longer exist
  done
  restore_sysctls
  clean_hard_coded_dirs
)

# ---------------------------------------------------------------------------------------------
# up

# fail_up REASON COMPONENT...: explains, shows the components' last log lines, exits.
fail_up() {
  local reason=$1 c
  shift
  printf 'local-cluster: up failed: %s\n' "$reason" >&2
  for c in "${components[@]}"; do # also any other started component that has died
    [ -f "$run/$c.pid" ] && ! running "$c" && [[ " $* " != *" $c "* ]] && set -- "$@" "$c"
  done
  for c in "$@"; do
    show_log "$c" 30
  done
  printf 'local-cluster: the cluster is left as it is for inspection; hack/local-cluster.sh down stops it\n' >&2
  exit 1
}

show_log() {
  local state_word=stopped
  running "$1" && state_word=running
  printf -- '----- %s (%s): last %s lines of %s\n' "$1" "$state_word" "$2" "$logs/$1.log" >&2
  tail -n "$2" "$logs/$1.log" >&2 2>/dev/null || true
}

# wait_until WHAT "COMPONENT..." CHECK...: polls CHECK; gives up at the deadline of `up`, or
# as soon as one of the components it depends on has exited.
wait_until() {
  local what=$1 watched=$2 start=$SECONDS c
  shift 2
  until "$@" >/dev/null 2>&1; do
    for c in $watched; do
      running "$c" || fail_up "$c exited while waiting for $what" "$c"
    done
    ((SECONDS < deadline)) || fail_up "no $what within ${up_timeout}s" $watched
    sleep 0.25
  done
  log "$what after $((SECONDS - start))s"
}

node_ready() {
  [ "$(kc get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

default_service_account() {
  kc -n default get serviceaccount default && kc -n default get configmap kube-root-ca.crt
}

# http_ok HOST PORT PATH: a plain HTTP GET answers 200 (no curl needed).
http_ok() {
  (
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$1" >&3
    read -r -t 2 _ status _ <&3 && [ "$status" = 200 ]
  )
}

import_sandbox_image() {
  if [ ! -f "$image_dir/pause.tar" ]; then
    command -v go >/dev/null || die "go is needed to build the pause image"
    "$repo/hack/images/build.sh" -o "$image_dir" pause >/dev/null 9>&-
  fi
  ctr_k8s images import "$image_dir/pause.tar" >/dev/null
}

start_control_plane() {
  start_component etcd --name cacheqos --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "cacheqos=http://127.0.0.1:$etcd_peer_port" \
    --quota-backend-bytes 1073741824 --unsafe-no-fsync

  # kubelet-preferred-address-types: the node name does not resolve, its InternalIP does
  # (kubectl logs/exec go through the API server to kubelet).
  start_component kube-apiserver \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$api_ip" --advertise-address "$api_ip" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --service-account-key-file "$pki/service-account.pub" \
    --service-account-signing-key-file "$pki/service-account.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$service_cidr" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false
  wait_until "API server ready" "etcd kube-apiserver" kc get --raw /readyz

  start_component kube-controller-manager \
    --kubeconfig "$state/kubeconfigs/kube-controller-manager" \
    --authentication-kubeconfig "$state/kubeconfigs/kube-controller-manager" \
    --authorization-kubeconfig "$state/kubeconfigs/kube-controller-manager" \
    --bind-address 127.0.0.1 --secure-port "$controller_manager_port" --leader-elect=false \
    --service-account-private-key-file "$pki/service-account.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --use-service-account-credentials=true --service-cluster-ip-range "$service_cidr" \
    --flex-volume-plugin-dir "$state/kube-controller-manager/volume-plugins" --profiling=false
  start_component kube-scheduler \
    --kubeconfig "$state/kubeconfigs/kube-scheduler" \
    --authentication-kubeconfig "$state/kubeconfigs/kube-scheduler" \
    --authorization-kubeconfig "$state/kubeconfigs/kube-scheduler" \
    --bind-address 127.0.0.1 --secure-port "$scheduler_port" --leader-elect=false --profiling=false
}

# start_containerd: the selected node's containerd, with the sandbox image.
start_containerd() {
  start_component "containerd.$node" --config "$containerd_dir/config.toml"
  wait_until "containerd of $node" "containerd.$node" ctr --address "$containerd_sock" version
  import_sandbox_image
}

# start_kubelet: the selected node's kubelet.
start_kubelet() {
  start_component "kubelet.$node" --config "$kubelet_dir/config.yaml" \
    --kubeconfig "$state/kubeconfigs/kubelet-$node" --hostname-override "$node" --node-ip "$node_ip" \
    --node-labels "$node_label" --root-dir "$kubelet_dir" --cert-dir "$kubelet_dir/pki"
}

cmd_up() {
  preflight
  check_host
  lock
  check_settings
  claim_host
  deadline=$((SECONDS + up_timeout))
  local start=$SECONDS c k all=1 any=0
  for c in "${components[@]}"; do
    if running "$c"; then any=1; else all=0; fi
  done
  if [ $all = 1 ]; then
    log "already running"
  else
    if [ $any = 1 ]; then
      log "some components had stopped: restarting all"
      teardown host
    fi
    mkdir -p "$image_dir"
    write_pki
    write_configs
    record_hard_coded_dirs
    record_nft_tables
    save_sysctls
    setup_network
    setup_cgroups
    log "cgroup $(cgroup_v2 && echo v2 || echo v1), cgroupfs driver; $node_count node(s) from $api_ip, pods $(cluster_cidr), Services $service_cidr"

    for k in $(node_indexes); do
      select_node "$k"
      start_containerd
    done
    start_control_plane
    for k in $(node_indexes); do
      select_node "$k"
      start_kubelet
    done
    start_component kube-proxy --config "$state/kube-proxy.yaml"
  fi
  for k in $(node_indexes); do
    select_node "$k"
    wait_until "node $node Ready" "containerd.$node kubelet.$node kube-apiserver" node_ready
  done
  wait_until "default ServiceAccount" "kube-controller-manager" default_service_account
  wait_until "kube-proxy synced" "kube-proxy" http_ok "$api_ip" "$proxy_healthz_port" /healthz
  log "cluster ready in $((SECONDS - start))s: export KUBECONFIG=$admin_kubeconfig"
}

# ---------------------------------------------------------------------------------------------
# Other commands

cmd_down() {
  require_root
  if [ ! -d "$state" ]; then
    log "nothing to stop: $state does not exist"
    return 0
  fi
  lock
  local other
  other=$(owner)
  if [ -n "$other" ] && [ "$other" != "$state" ]; then
    log "the host belongs to the cluster of $other: stopping only the processes of $state"
    teardown processes
  else
    teardown host
    rm -f "$owner_file"
  fi
  log "down"
}

cmd_purge() {
  cmd_down
  [ -d "$state" ] || return 0
  # rm must never follow a mount into host directories (a pod's hostPath, for one).
  [ -z "$(state_mounts)" ] || die "not deleting $state: still mounted: $(state_mounts | tr '\n' ' ')"
  rm -rf --one-file-system "$state"
  log "purged $state"
}

rss_mib() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }

cmd_status() {
  local c pid rss total=0 all=1 p
  printf '%-30s %8s %9s\n' COMPONENT PID RSS_MiB
  for c in "${components[@]}"; do
    if pid=$(pid_of "$c"); then
      rss=$(rss_mib "$pid")
      total=$((total + rss))
      printf '%-30s %8s %9s\n' "$c" "$pid" "$rss"
    else
      all=0
      printf '%-30s %8s %9s\n' "$c" - stopped
    fi
  done
  local shims pods shim_rss=0 pod_rss=0
  shims=$(our_shims)
  pods=$(pod_processes)
  for p in $shims; do shim_rss=$((shim_rss + $(rss_mib "$p"))); done
  for p in $pods; do pod_rss=$((pod_rss + $(rss_mib "$p"))); done
  printf '%-30s %8s %9s\n' "shims ($(wc -w <<<"$shims"))" - "$shim_rss" "pod processes ($(wc -w <<<"$pods"))" - "$pod_rss"
  printf '%-30s %8s %9s\n' total - $((total + shim_rss + pod_rss))
  if [ $all = 1 ]; then
    kc get nodes -o wide 2>/dev/null || true
    return 0
  fi
  return 3
}

# cmd_env: ctr talks to node 1's containerd; CACHEQOS_CLUSTER_CONTAINERD_ADDRESSES lists every
# node's (hack/images/import.sh imports into each).
cmd_env() {
  local k sockets=()
  for k in $(node_indexes); do
    select_node "$k"
    sockets+=("$containerd_sock")
  done
  printf 'export KUBECONFIG=%q\n' "$admin_kubeconfig"
  printf 'export CONTAINERD_ADDRESS=%q\n' "${sockets[0]}"
  printf 'export CACHEQOS_CLUSTER_CONTAINERD_ADDRESSES=%q\n' "${sockets[*]}"
  printf 'export CONTAINERD_NAMESPACE=k8s.io\n'
  printf 'export CACHEQOS_CLUSTER_DIR=%q\n' "$state"
  printf 'export PATH=%q:"$PATH"\n' "$kube_bin"
}

# select_node_named NAME: select_node for the node called NAME, or an error.
select_node_named() {
  local k
  for k in $(node_indexes); do
    [ "$(node_name "$k")" = "$1" ] && { select_node "$k"; return; }
  done
  die "no node '$1' in this cluster of $node_count node(s)"
}

# cmd_node_stop NAME: the node fails as a machine losing power would look from the cluster:
# its kubelet, containerd, shims and pod processes are SIGKILLed at once (no graceful pod
# termination, no status update). Its bridge and address stay: the nodes share one network
# stack (see the header), so its pods' addresses stop answering rather than vanish.
cmd_node_stop() {
  require_root
  lock
  select_node_named "$1"
  local c pid pids p cmdline
  pids=$(node_pod_processes)
  for c in "kubelet.$node" "containerd.$node"; do
    pid=$(pid_of "$c") && pids+=" $pid"
  done
  for p in /proc/[0-9]*; do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $cmdline == *containerd-shim*" -address $containerd_sock "* ]] && pids+=" ${p#/proc/}"
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  rm -f "$run/kubelet.$node.pid" "$run/containerd.$node.pid"
  log "killed $node: kubelet, containerd, shims and $(wc -w <<<"$pids") processes in all"
}

# cmd_node_start NAME: the failed node's containerd and kubelet start again; kubelet restarts
# the pods the API server still binds to the node.
cmd_node_start() {
  require_root
  lock
  select_node_named "$1"
  deadline=$((SECONDS + up_timeout))
  running "containerd.$node" || start_containerd
  running "kubelet.$node" || start_kubelet
  wait_until "node $node Ready" "containerd.$node kubelet.$node kube-apiserver" node_ready
}

cmd_logs() {
  local lines=${1:-40} c
  [[ $lines =~ ^[0-9]+$ ]] || die "logs: '$lines' is not a number of lines"
  for c in "${components[@]}"; do
    [ -f "$logs/$c.log" ] && show_log "$c" "$lines" 2>&1
  done
  return 0
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  purge) cmd_purge ;;
  status) cmd_status ;;
  env) cmd_env ;;
  kubeconfig) echo "$admin_kubeconfig" ;;
  logs) cmd_logs "${2:-}" ;;
  node-stop) cmd_node_stop "${2:?node-stop needs a node name}" ;;
  node-start) cmd_node_start "${2:?node-start needs a node name}" ;;
  *)
    echo "usage: $0 up|down|purge|status|env|kubeconfig|logs [N]|node-stop NODE|node-start NODE" >&2
    exit 2
    ;;
esac
