// Command gpu-kubelet-plugin is the simulated NVIDIA GPU DRA kubelet plugin of the draconf test
// bed: a real DRA kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin, DRA v1
// gRPC service, kubelet plugin registration) for GPUs that exist only as data.
//
// # What it simulates
//
// Only the GPU hardware and NVML.  Instead of loading libnvidia-ml.so.1 it reads the
// simulated NVML data <driver root>/usr/share/nvidia-sim/nvml.json (see internal/nvmlsim),
// which the test bed writes beside the simulated device nodes <driver root>/dev/nvidia<minor>
// (character devices, major 195) and /dev/nvidiactl (195, 255) and the nvidia-smi stand-in
// <driver root>/usr/bin/nvidia-smi.  In a container the driver root is mounted at
// /driver-root (the chart's volume "driver-root", host path NVIDIA_DRIVER_ROOT, e.g.
// /run/nvidia/driver for the GPU Operator's containerized driver).
//
// # What it mirrors
//
// kubernetes-sigs/dra-driver-nvidia-gpu at tag v0.4.1 (commit 764900e7833798a1528bd52a2af3e1b2d5f7a616),
// cmd/gpu-kubelet-plugin, with the chart's default feature gates (no DynamicMIG or
// passthrough; MIG disabled) except the GPU-sharing gates TimeSlicingSettings and MPSSupport,
// which --feature-gates turns on (the bed installs the chart with both; see "GPU sharing"):
//
//   - flags and environment variables (main.go, pkg/flags/kubeclient.go): --node-name
//     NODE_NAME, --namespace NAMESPACE, --cdi-root CDI_ROOT, --nvidia-driver-root
//     NVIDIA_DRIVER_ROOT|HOST_DRIVER_ROOT, --container-driver-root DRIVER_ROOT_CTR_PATH,
//     --kubelet-registrar-directory-path KUBELET_REGISTRAR_DIRECTORY_PATH,
//     --kubelet-plugins-directory-path KUBELET_PLUGINS_DIRECTORY_PATH, --healthcheck-port
//     HEALTHCHECK_PORT, --feature-gates FEATURE_GATES, --kubeconfig KUBECONFIG, --kube-api-qps, --kube-api-burst, -v.
//     --image-name IMAGE_NAME (the MPS control daemon's image).
//     The chart also sets SERVICE_ACCOUNT_NAME, NVIDIA_VISIBLE_DEVICES=void,
//     NVIDIA_MIG_CONFIG_DEVICES, LOG_VERBOSITY, MASK_NVIDIA_DRIVER_PARAMS; they are accepted
//     and ignored.  Upstream's --cdi-root default is /etc/cdi (the chart sets /var/run/cdi);
//     here it defaults to /var/run/cdi.
//   - device discovery and ResourceSlice content (deviceinfo.go, nvlib.go, driver.go): one
//     pool named after the node, one slice, devices gpu-<minor> with the full-GPU attribute
//     set and capacity memory, published through the helper's PublishResources.
//   - preparation (device_state.go, cdi.go): one transient CDI spec per claim, kind
//     k8s.gpu.nvidia.com/claim, file k8s.gpu.nvidia.com-claim_<claimUID>.yaml in the CDI
//     root, devices <claimUID>-gpu-<minor>, CDI device IDs
//     k8s.gpu.nvidia.com/claim=<claimUID>-gpu-<minor>; the prepared claims recorded in
//     <kubelet plugins dir>/gpu.nvidia.com/checkpoint.json (in a format of our own, see
//     internal/plugin/ledger.go); a device another prepared claim holds is refused.
//   - the gRPC health service for the chart's probes (health.go).
//
// The CDI container edits are those of the simulated driver (nvcdi is not used): per device
// the node /dev/nvidia<minor>; common to the claim /dev/nvidiactl,
// NVIDIA_VISIBLE_DEVICES=<UUIDs of the claim's GPUs> and read-only bind mounts of the
// nvidia-smi stand-in and nvml.json.  No hooks and no driver libraries.
//
// # Simulated faults
//
// --feature-gates DynamicMIG=true (or FEATURE_GATES, as the chart's featureGates value sets it):
// MIG-capable GPUs (nvml.json "mig") are published as partitionable devices with their
// possible MIG devices, and MIG devices are prepared (internal/plugin/mig.go).
//
// --simulate-fault NAME (repeatable) or SIMULATE_FAULTS=a,b (on the nodes SIMULATE_FAULTS_ON_NODES
// names, if set): attribute-drift, no-devices,
// cdi-not-injected, cdi-wrong-device, unprepare-fails, crash, admin-access-exclusive,
// nvml-flaky, sharing-config-ignored, mig-counters-ignored, mig-parent-mislabelled,
// mps-daemon-fails.  See
// internal/plugin.
//
// # GPU sharing
//
// With --feature-gates TimeSlicingSettings=true,MPSSupport=true (the chart's featureGates,
// off by default upstream) claims may carry an opaque GpuConfig with a TimeSlicing or MPS
// sharing strategy; see internal/plugin/sharing.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"draconf.local/testbed/gpu-driver/internal/plugin"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// env returns the first set environment variable of names, or def.
func env(def string, names ...string) string {
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			return v
		}
	}
	return def
}

func envInt(def int, name string) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func envFloat(def float64, name string) float64 {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			return n
		}
	}
	return def
}

func run(args []string) int {
	fs := flag.NewFlagSet("gpu-kubelet-plugin", flag.ContinueOnError)
	klog.InitFlags(fs)
	cfg := &plugin.Config{}
	var kubeconfig string
	var qps float64
	var burst int
	var faults []string
	if v := os.Getenv("SIMULATE_FAULTS"); v != "" {
		faults = append(faults, v)
	}
	fs.StringVar(&cfg.NodeName, "node-name", env("", "NODE_NAME"), "This node's name: the pool the plugin publishes and the node it prepares claims on (required). [$NODE_NAME]")
	fs.StringVar(&cfg.Namespace, "namespace", env("default", "NAMESPACE"), "The plugin's own namespace, where it creates the MPS control daemons' Deployments. [$NAMESPACE]")
	fs.StringVar(&cfg.ImageName, "image-name", env("", "IMAGE_NAME"), "Image of the MPS control daemons' containers. [$IMAGE_NAME]")
	fs.StringVar(&cfg.CDIRoot, "cdi-root", env("/var/run/cdi", "CDI_ROOT"), "Directory the claims' CDI specs are written to, as an absolute path. [$CDI_ROOT]")
	hostRootUsage := "Where the node's NVIDIA driver is installed, seen from the host: / for a driver on the host, /run/nvidia/driver for the GPU Operator's driver container. Host paths in the CDI specs start here. [$NVIDIA_DRIVER_ROOT, $HOST_DRIVER_ROOT]"
	fs.StringVar(&cfg.HostDriverRoot, "nvidia-driver-root", env("/", "NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"), hostRootUsage)
	fs.StringVar(&cfg.HostDriverRoot, "host-driver-root", env("/", "NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"), "Another name of --nvidia-driver-root.")
	fs.StringVar(&cfg.ContainerDriverRoot, "container-driver-root", env("/driver-root", "DRIVER_ROOT_CTR_PATH"), "The NVIDIA driver root as mounted into this container: the simulated NVML data and device nodes are read there. [$DRIVER_ROOT_CTR_PATH]")
	fs.StringVar(&cfg.KubeletRegistrarDirectoryPath, "kubelet-registrar-directory-path", env(kubeletplugin.KubeletRegistryDir, "KUBELET_REGISTRAR_DIRECTORY_PATH"), "The kubelet's plugin registration directory (absolute): the registration socket goes there. [$KUBELET_REGISTRAR_DIRECTORY_PATH]")
	fs.StringVar(&cfg.KubeletPluginsDirectoryPath, "kubelet-plugins-directory-path", env(kubeletplugin.KubeletPluginsDir, "KUBELET_PLUGINS_DIRECTORY_PATH"), "The kubelet's plugins directory (absolute): the DRA socket and the claim ledger go in its gpu.nvidia.com directory. [$KUBELET_PLUGINS_DIRECTORY_PATH]")
	fs.IntVar(&cfg.HealthcheckPort, "healthcheck-port", envInt(-1, "HEALTHCHECK_PORT"), "TCP port of the gRPC health service: 0 for any free port, below 0 for none. [$HEALTHCHECK_PORT]")
	fs.StringVar(&kubeconfig, "kubeconfig", env("", "KUBECONFIG"), "A kubeconfig file for the API server; none: the pod's service account. [$KUBECONFIG]")
	fs.Float64Var(&qps, "kube-api-qps", envFloat(5, "KUBE_API_QPS"), "Requests per second the API client may send on average. [$KUBE_API_QPS]")
	fs.IntVar(&burst, "kube-api-burst", envInt(10, "KUBE_API_BURST"), "Requests the API client may send at once above that rate. [$KUBE_API_BURST]")
	gates := env("", "FEATURE_GATES")
	fs.StringVar(&gates, "feature-gates", gates, "Comma-separated NAME=true|false, as the chart's featureGates: TimeSlicingSettings, MPSSupport, DynamicMIG. [$FEATURE_GATES]")
	fs.Func("simulate-fault", "A malfunction to simulate, repeatable (or $SIMULATE_FAULTS, comma-separated): "+
		faultNames()+".", func(v string) error { faults = append(faults, v); return nil })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "Error: the plugin takes flags only, not %q\n", fs.Args())
		return 1
	}
	defer klog.Flush()

	var err error
	if cfg.Faults, err = plugin.ParseFaults(faults...); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		return 1
	}
	// $SIMULATE_FAULTS_ON_NODES: the faults act on these nodes only (one broken node among
	// healthy ones, which a sweep over every node must single out).
	if only := os.Getenv("SIMULATE_FAULTS_ON_NODES"); only != "" && !slices.Contains(strings.Split(only, ","), cfg.NodeName) {
		cfg.Faults = plugin.Faults{}
	}
	if cfg.FeatureGates, err = plugin.ParseFeatureGates(gates); err != nil {
		fmt.Fprintf(os.Stderr, "Error: --feature-gates %q: %v\n", gates, err)
		return 1
	}
	cfg.DynamicMIG = cfg.FeatureGates.Enabled(plugin.FeatureGateDynamicMIG)
	if cfg.NodeName == "" {
		fmt.Fprintln(os.Stderr, "Error: no node name: set --node-name or NODE_NAME")
		return 1
	}
	klog.Infof("Starting gpu-kubelet-plugin (simulated NVIDIA GPU DRA driver) on node %q: driver root %s (in container %s), CDI root %s, simulated faults: %s",
		cfg.NodeName, cfg.HostDriverRoot, cfg.ContainerDriverRoot, cfg.CDIRoot, orNone(cfg.Faults.String()))

	if cfg.Faults.Has(plugin.FaultCrash) {
		klog.Infof("Asking NVML for the GPUs (simulated fault crash: it will not initialise)")
		klog.Flush()
		fmt.Fprintf(os.Stderr, "Error: %v\n", plugin.SimulatedNVMLInitError())
		return 1
	}

	restConfig, err := clientConfig(kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: API client: %v\n", err)
		return 1
	}
	restConfig.QPS = float32(qps)
	restConfig.Burst = burst
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: API client: %v\n", err)
		return 1
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	defer cancel()
	if err := plugin.Run(ctx, cfg, client); err != nil {
		klog.Flush()
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		return 1
	}
	klog.Infof("Stopped")
	return 0
}

// clientConfig is how to reach the API server: from the kubeconfig file if one is named,
// else as the pod's service account.
func clientConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no kubeconfig given and not in a pod: %w", err)
	}
	return c, nil
}

func faultNames() string {
	names := make([]string, len(plugin.AllFaults))
	for i, f := range plugin.AllFaults {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
