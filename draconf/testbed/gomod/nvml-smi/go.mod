// The nvidia-smi stand-in of beds running NVIDIA's own DRA driver over NVIDIA's mock NVML
// (draconf/testbed/upstream_nvidia.py): it reads the GPUs through NVML (go-nvml), so a
// container shows what the NVML library it was given reports.  Built with cgo, as go-nvml
// loads libnvidia-ml.so.1 at run time.
module draconf.local/testbed/nvml-smi

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.4-1
