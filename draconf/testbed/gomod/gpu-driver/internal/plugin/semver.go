package plugin

import (
	"fmt"
	"strconv"
	"strings"
)

// normalizeVersion turns a loosely written version into the strict semver 2.0 string the
// NVIDIA plugin publishes for driverVersion, cudaDriverVersion and cudaComputeCapability
// (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go, which
// parses them with github.com/Masterminds/semver/v3 and prints them back).  What that does to
// the versions NVML reports, and this reproduces: a leading "v" goes, missing minor and patch
// numbers become 0 and leading zeros are dropped ("580.95.05" is published as "580.95.5",
// "13.0" as "13.0.0"); a pre-release and build part are kept.  Masterminds is not a dependency
// of the bed's build.
func normalizeVersion(v string) (string, error) {
	bad := fmt.Errorf("%q is not a version (MAJOR[.MINOR[.PATCH]][-PRERELEASE][+BUILD])", v)
	rest := strings.TrimPrefix(strings.TrimSpace(v), "v")
	rest, build, hasBuild := strings.Cut(rest, "+")
	core, pre, hasPre := strings.Cut(rest, "-")
	numbers := strings.Split(core, ".")
	if len(numbers) > 3 {
		return "", bad
	}
	var mmp [3]uint64
	for i, n := range numbers {
		if n == "" || strings.Trim(n, "0123456789") != "" {
			return "", bad
		}
		value, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%w: %v", bad, err)
		}
		mmp[i] = value
	}
	out := fmt.Sprintf("%d.%d.%d", mmp[0], mmp[1], mmp[2])
	for _, part := range []struct {
		sep, text string
		present   bool
	}{{"-", pre, hasPre}, {"+", build, hasBuild}} {
		if !part.present {
			continue
		}
		for _, id := range strings.Split(part.text, ".") {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return "", bad
			}
		}
		out += part.sep + part.text
	}
	return out, nil
}
