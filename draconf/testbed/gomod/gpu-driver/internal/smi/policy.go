package smi

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// ExitNoPermission is nvidia-smi's status when the caller may not change a setting.
const ExitNoPermission = 4

// computeModes maps what -c accepts (a number or a name) to the mode nvidia-smi prints.
var computeModes = map[string]string{
	"0": nvmlsim.ComputeModeDefault, "DEFAULT": nvmlsim.ComputeModeDefault,
	"2": nvmlsim.ComputeModeProhibited, "PROHIBITED": nvmlsim.ComputeModeProhibited,
	"3": nvmlsim.ComputeModeExclusiveProcess, "EXCLUSIVE_PROCESS": nvmlsim.ComputeModeExclusiveProcess,
}

// setComputeMode is `nvidia-smi [-i ID] -c MODE`, which upstream's plugin runs for TimeSlicing
// (DEFAULT) and MPS (EXCLUSIVE_PROCESS): it changes the GPUs' state, so only where the state
// directory is writable (the plugin's driver root, not a container's read-only view).
func setComputeMode(w io.Writer, env Env, gpus []GPU, arg string) int {
	mode, ok := computeModes[strings.ToUpper(arg)]
	if !ok {
		fmt.Fprint(w, invalidArgs)
		return ExitInvalidArgs
	}
	for _, g := range gpus {
		bus := nvmlsim.BusIDLong(g.PCIBusID)
		if g.State.Mode() == mode {
			fmt.Fprintf(w, "Compute mode is already set to %s for GPU %s.\n", strings.ToUpper(mode), bus)
			continue
		}
		g.State.ComputeMode = mode
		if err := nvmlsim.SaveState(env.StateDir, g.UUID, g.State); err != nil {
			fmt.Fprintf(w, "Unable to set the compute mode for GPU %s: Insufficient Permissions\n", bus)
			return ExitNoPermission
		}
		fmt.Fprintf(w, "Set compute mode to %s for GPU %s.\n", strings.ToUpper(mode), bus)
	}
	fmt.Fprintln(w, "All done.")
	return ExitOK
}

// runComputePolicy is `nvidia-smi compute-policy [-i ID] (--set-timeslice N | -l)`: upstream's
// plugin runs --set-timeslice for TimeSlicing claims (0=DEFAULT, 1=SHORT, 2=MEDIUM, 3=LONG) and
// resets it to 0 on unprepare; -l lists each GPU's policy (the table's layout is the
// stand-in's: one row per GPU with its index, UUID and time-slice level).
func runComputePolicy(args []string, stdout, stderr io.Writer, env Env) int {
	var ids []string
	list, set := false, ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		var ok = true
		switch {
		case a == "-l" || a == "--list":
			list = true
		case a == "-i" || a == "--id":
			var v string
			v, ok = next()
			ids = append(ids, strings.Split(v, ",")...)
		case strings.HasPrefix(a, "--id="):
			ids = append(ids, strings.Split(strings.TrimPrefix(a, "--id="), ",")...)
		case a == "--set-timeslice":
			set, ok = next()
		case strings.HasPrefix(a, "--set-timeslice="):
			set = strings.TrimPrefix(a, "--set-timeslice=")
		default:
			ok = false
		}
		if !ok {
			fmt.Fprint(stdout, invalidArgs)
			return ExitInvalidArgs
		}
	}
	level := -1
	if set != "" {
		n, err := strconv.Atoi(set)
		if err != nil || n < 0 || n >= len(nvmlsim.TimeSliceNames) {
			fmt.Fprint(stdout, invalidArgs)
			return ExitInvalidArgs
		}
		level = n
	}
	if list == (level >= 0) {
		fmt.Fprint(stdout, invalidArgs)
		return ExitInvalidArgs
	}
	data, err := nvmlsim.LoadFile(env.NVMLPath)
	if err != nil {
		fmt.Fprint(stdout, driverFailed)
		return ExitDriverFailed
	}
	gpus, code := loadGPUs(stdout, env, data)
	if code != ExitOK {
		return code
	}
	if len(ids) > 0 {
		if gpus, err = selectIDs(gpus, ids); err != nil {
			fmt.Fprintln(stdout, "No devices were found")
			return ExitNoDevices
		}
	}
	if list {
		fmt.Fprintln(stdout, "GPU compute policies:")
		fmt.Fprintf(stdout, "%-4s %-42s %s\n", "GPU", "UUID", "Timeslice")
		for _, g := range gpus {
			fmt.Fprintf(stdout, "%-4d %-42s %s\n", g.Index, g.UUID, g.State.TimeSliceName())
		}
		return ExitOK
	}
	for _, g := range gpus {
		g.State.TimeSlice = level
		if err := nvmlsim.SaveState(env.StateDir, g.UUID, g.State); err != nil {
			fmt.Fprintf(stdout, "Unable to set the timeslice for GPU %s: Insufficient Permissions\n",
				nvmlsim.BusIDLong(g.PCIBusID))
			return ExitNoPermission
		}
		fmt.Fprintf(stdout, "Set timeslice to %s for GPU %s.\n", strings.ToUpper(g.State.TimeSliceName()),
			nvmlsim.BusIDLong(g.PCIBusID))
	}
	return ExitOK
}
