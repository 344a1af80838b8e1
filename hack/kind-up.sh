#!/usr/bin/env bash
# For Docker users: a kind cluster with fake GPUs, running Walras from this checkout.
#
#   hack/kind-up.sh            # cluster "walras": 1 control plane + 3 workers (k80, p100, v100)
#   KIND_CLUSTER=x GPUS=4 hack/kind-up.sh
#   kind delete cluster --name walras    # tear down
#
# Needs docker, kind, kubectl and helm on PATH. Each worker gets the label walras.dev/gpu-type and
# a fake nvidia.com/gpu capacity, patched through the node status subresource (the documented way
# to advertise an extended resource; no device plugin). Walras binds pods onto those GPUs;
# containers that do not really use a GPU run normally. Not exercised by CI (no Docker here).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

cluster="${KIND_CLUSTER:-walras}"
gpus="${GPUS:-8}"
types=(k80 p100 v100)
image="walras:dev"

if ! kind get clusters | grep -qx "$cluster"; then
	kind create cluster --name "$cluster" --wait 120s --config - <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
$(for _ in "${types[@]}"; do printf '  - role: worker\n'; done)
YAML
fi
kubectl config use-context "kind-$cluster" >/dev/null

docker build --tag "$image" .
kind load docker-image "$image" --name "$cluster"

mapfile -t workers < <(kubectl get nodes --selector '!node-role.kubernetes.io/control-plane' \
	--output jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
for i in "${!workers[@]}"; do
	type="${types[i % ${#types[@]}]}"
	kubectl label node "${workers[i]}" --overwrite "walras.dev/gpu-type=$type"
	kubectl patch node "${workers[i]}" --subresource=status --type=json \
		--patch "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$gpus\"}]"
done

helm upgrade --install walras charts/walras --namespace walras-system --create-namespace \
	--set image.repository=walras --set image.tag=dev --set image.pullPolicy=Never --wait

# One ResourcePool per GPU type (k80, p100, v100), matching the labels above.
kubectl apply --filename examples/resourcepools.yaml

kubectl get nodes --label-columns walras.dev/gpu-type
echo "kind-up: Walras runs in kind-$cluster; try: kubectl apply -f examples/fungiblejob.yaml && kubectl get fjob -A"
