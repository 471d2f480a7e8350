package plugin

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// looseVersion is the non-strict pattern of github.com/Masterminds/semver/v3 (NewVersion),
// which the NVIDIA plugin uses as semver.MustParse(x).String() to publish driverVersion,
// cudaDriverVersion and cudaComputeCapability
// (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go).
// Missing minor/patch parts become 0 and leading zeros are dropped, so "580.95.05" is
// published as "580.95.5" and "13.0" as "13.0.0".  Masterminds is not a dependency here;
// this reproduces the part of it the plugin relies on.
var looseVersion = regexp.MustCompile(`^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?` +
	`(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?` +
	`(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?$`)

// normalizeVersion returns the strict semver 2.0 string Masterminds' Version.String() gives
// for a loosely written version.
func normalizeVersion(v string) (string, error) {
	m := looseVersion.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return "", fmt.Errorf("invalid semantic version %q", v)
	}
	var parts [3]uint64
	for i, s := range []string{m[1], strings.TrimPrefix(m[2], "."), strings.TrimPrefix(m[3], ".")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return "", fmt.Errorf("invalid semantic version %q: %w", v, err)
		}
		parts[i] = n
	}
	out := fmt.Sprintf("%d.%d.%d", parts[0], parts[1], parts[2])
	if m[5] != "" {
		out += "-" + m[5]
	}
	if m[8] != "" {
		out += "+" + m[8]
	}
	return out, nil
}
