package smi

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// MIG devices a container sees: those whose GPU instance and compute instance capability
// nodes (/dev/nvidia-caps/nvidia-cap<minor>, major nvmlsim.NvidiaCapsMajor, minors as the
// driver's mig-minors numbers them) it was given, on a GPU whose /dev/nvidia<minor> it has.
// That is how the real driver limits a container to its MIG device.

// visibleMigs fills in each GPU's MIG devices.
func visibleMigs(env Env, gpus []GPU) {
	paths, _ := filepath.Glob(filepath.Join(env.DevDir, "nvidia-caps", "nvidia-cap[0-9]*"))
	type key struct{ gpu, gi int }
	giAccess, ciAccess := map[key]bool{}, map[key]bool{}
	for _, p := range paths {
		if _, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "nvidia-cap")); err != nil {
			continue
		}
		rdev, isChar, err := env.Stat(p)
		if err != nil || !isChar || nvmlsim.DevMajor(rdev) != nvmlsim.NvidiaCapsMajor {
			continue
		}
		gpu, gi, ci, ok := nvmlsim.DecodeCapMinor(nvmlsim.DevMinor(rdev))
		switch {
		case !ok:
		case ci < 0:
			giAccess[key{gpu, gi}] = true
		case ci == 0:
			ciAccess[key{gpu, gi}] = true
		}
	}
	for i := range gpus {
		for _, s := range gpus[i].MigSlots() {
			if k := (key{gpus[i].Minor, s.GI}); giAccess[k] && ciAccess[k] {
				gpus[i].MIGs = append(gpus[i].MIGs, s)
			}
		}
		sort.SliceStable(gpus[i].MIGs, func(a, b int) bool { return gpus[i].MIGs[a].GI < gpus[i].MIGs[b].GI })
	}
}

// printList is `nvidia-smi -L`: each GPU, and under it its MIG devices, as the real one prints
// them ("  MIG 1g.10gb     Device  0: (UUID: MIG-...)").
func printList(w io.Writer, gpus []GPU) {
	for _, g := range gpus {
		fmt.Fprintf(w, "GPU %d: %s (UUID: %s)\n", g.Index, g.ProductName, g.UUID)
		for i, m := range g.MIGs {
			fmt.Fprintf(w, "  MIG %-12sDevice %2d: (UUID: %s)\n", m.Profile.Name, i,
				nvmlsim.MigUUID(g.UUID, m.Profile.ID, m.Start))
		}
	}
}
