#!/usr/bin/env bash
# The walkthrough's six workloads done by hand with kubectl: what `draconf run -k TestWorkload`
# does, without its checks.  The baseline of benchmarks/workloads_vs_kubectl.py (issue 13).
#
#   KUBECONFIG=... IMAGE=draconf.local/busybox:1.35.0 bash benchmarks/kubectl_workloads.sh
#
# Needs kubectl and jq (Debian: jq) on PATH.
#
# For each workload, in turn, as the suite runs them serially: a namespace; `kubectl apply` of
# its manifest as written (the image swapped for $IMAGE, as the bed's profile does); wait for
# its pods to be Ready (shared-claim's pinned to $SHARED_NODE, a node with three GPUs, as the
# suite does: README, "Templated fields"); `nvidia-smi -L` exec'd in each; delete the pods; wait for the claims to
# be released (template claims deleted, the shared claim's reservedFor empty); as the suite's
# cleanup check does, prove the freed GPUs allocatable again (a probe claim selecting them by
# uuid and a pod for it, per node, deleted once allocated); delete the namespace without
# waiting for it, only until its claims hold no device (what the next workload needs, as the
# suite waits).  At the end, as the suite ends its session, wait until every namespace is gone.
# Prints each workload's seconds, the final wait's and the total.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBECTL=${KUBECTL:-kubectl}
IMAGE=${IMAGE:-ubuntu:24.04}
RUN=${RUN:-kubectl-$$}
SHARED_NODE=${SHARED_NODE:-gpu-h100-0}
declare -A MANIFEST=(
  [single-gpu]=01-single-gpu.yaml [model-selected]=02-model-selected.yaml
  [memory-selected]=03-memory-selected.yaml [two-gpu]=05-two-gpus.yaml
  [shared-claim]=06-shared-claim.yaml [deployment]=07-deployment.yaml)
ORDER=(single-gpu model-selected memory-selected two-gpu shared-claim deployment)

total_start=$(date +%s.%N)
for workload in "${ORDER[@]}"; do
  start=$(date +%s.%N)
  ns="bench-${RUN}-${workload}"
  $KUBECTL create namespace "$ns" >/dev/null
  sed "s#ubuntu:24.04#${IMAGE}#" "manifests/${MANIFEST[$workload]}" |
    if [ "$workload" = shared-claim ]; then
      awk -v node="$SHARED_NODE" '/^kind: /{kind=$2} {print} kind=="Pod" && /^spec:$/ {
        print "  nodeSelector:"; print "    kubernetes.io/hostname: " node}'
    else cat; fi | $KUBECTL apply -n "$ns" -f - >/dev/null
  # A Deployment's pods do not exist yet right after apply: wait for the ReplicaSet's.
  until [ -n "$($KUBECTL get pods -n "$ns" -o name)" ]; do sleep 0.1; done
  $KUBECTL wait -n "$ns" --for=condition=Ready pod --all --timeout=120s >/dev/null
  # In every container, as the suite's injection check does (a container without a claim must
  # see no GPU, so its exec may fail).
  for pod in $($KUBECTL get pods -n "$ns" -o name); do
    for container in $($KUBECTL get -n "$ns" "$pod" -o jsonpath='{.spec.containers[*].name}'); do
      $KUBECTL exec -n "$ns" "$pod" -c "$container" -- nvidia-smi -L >/dev/null 2>&1 || true
    done
  done
  # Consumers first, with a short grace period (a Deployment's: its owners orphan them, else the
  # garbage collector deletes them with their default 30 s), then wait for what they held.
  # What the claims hold, before the consumers go (generated claims go with them).
  held=$($KUBECTL get resourceclaims -n "$ns" -o json |
         jq -c '[.items[].status.allocation.devices.results[]? | {pool, device}] | unique')
  $KUBECTL delete -n "$ns" deployments,replicasets --all --cascade=orphan >/dev/null
  $KUBECTL delete -n "$ns" pods --all --grace-period=1 --wait=true >/dev/null
  # Released: the generated claims deleted, the manifest's own claims reserved by nobody.
  own=$(grep -c '^kind: ResourceClaim$' "manifests/${MANIFEST[$workload]}" || true)
  until [ "$($KUBECTL get resourceclaims -n "$ns" -o name | wc -l)" -le "$own" ] &&
        [ -z "$($KUBECTL get resourceclaims -n "$ns" -o jsonpath='{.items[*].status.reservedFor}')" ]; do
    sleep 0.1
  done
  slices=$($KUBECTL get resourceslices -o json)
  for pool in $(jq -r '.[].pool' <<<"$held" | sort -u); do
    uuids=$(jq -c --argjson held "$held" --arg pool "$pool" '[.items[] | select(.spec.pool.name == $pool)
            | .spec.devices[] | select(.name as $n | $held | any(.pool == $pool and .device == $n))
            | .attributes.uuid.string]' <<<"$slices")
    probe="probe-${pool}"
    $KUBECTL apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: ${probe}}
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          count: $(jq length <<<"$uuids")
          selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].uuid in ${uuids//\"/\'}"}}]
---
apiVersion: v1
kind: Pod
metadata: {name: ${probe}}
spec:
  restartPolicy: Never
  resourceClaims: [{name: gpu, resourceClaimName: ${probe}}]
  securityContext: {runAsNonRoot: true, runAsUser: 65534, seccompProfile: {type: RuntimeDefault}}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
    - name: probe
      image: ${IMAGE}
      command: [sleep, "3600"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      resources: {claims: [{name: gpu}]}
EOF
    until [ -n "$($KUBECTL get resourceclaim -n "$ns" "$probe" -o jsonpath='{.status.allocation}')" ]; do
      sleep 0.1
    done
    $KUBECTL delete -n "$ns" pod "$probe" --grace-period=1 --wait=false >/dev/null
    $KUBECTL delete -n "$ns" resourceclaim "$probe" --wait=false >/dev/null
  done
  $KUBECTL delete namespace "$ns" --wait=false >/dev/null
  until [ -z "$($KUBECTL get resourceclaims -n "$ns" -o jsonpath='{.items[*].status.allocation}' 2>/dev/null)" ]; do
    sleep 0.1
  done
  printf '%-16s %6.2fs\n' "$workload" "$(echo "$(date +%s.%N) - $start" | bc)"
done
# As the suite ends its session: nothing of the run left, so wait for the namespaces to be gone
# (the namespace controller acts 5 s after a deletion: kube-controller-manager's fixed grace).
start=$(date +%s.%N)
namespaces=()
for workload in "${ORDER[@]}"; do namespaces+=("namespace/bench-${RUN}-${workload}"); done
$KUBECTL wait --for=delete "${namespaces[@]}" --timeout=120s >/dev/null
printf '%-16s %6.2fs\n' namespaces-gone "$(echo "$(date +%s.%N) - $start" | bc)"
printf '%-16s %6.2fs\n' total "$(echo "$(date +%s.%N) - $total_start" | bc)"
