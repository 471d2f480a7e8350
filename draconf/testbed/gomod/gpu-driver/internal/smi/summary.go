package smi

import (
	"fmt"
	"io"
	"strings"
	"time"

	"draconf.local/testbed/gpu-driver/internal/nvmlsim"
)

// The summary table of nvidia-smi without arguments, in the 91-column layout of the 570+
// drivers.  Telemetry the simulation does not have (fan, temperature, power) shows N/A, as
// real nvidia-smi does for unsupported fields; memory usage is 0 and no process runs.
const (
	rule    = "+-----------------------------------------------------------------------------------------+"
	midRule = "+-----------------------------------------+------------------------+----------------------+"
	eqRule  = "|=========================================+========================+======================|"
)

func row(a, b, c string) string { return "|" + a + "|" + b + "|" + c + "|" }

func printSummary(w io.Writer, gpus []GPU, data *nvmlsim.Data, now time.Time) {
	lines := []string{
		now.Format("Mon Jan _2 15:04:05 2006") + "       ",
		rule,
		fmt.Sprintf("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|",
			data.DriverVersion, data.DriverVersion, data.CudaMajorMinor()),
		midRule,
		row(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ", " Volatile Uncorr. ECC "),
		row(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ", " GPU-Util  Compute M. "),
		row(strings.Repeat(" ", 41), strings.Repeat(" ", 24), "               MIG M. "),
		eqRule,
	}
	for i, g := range gpus {
		name := g.ProductName
		if len(name) > 28 {
			name = name[:25] + "..."
		}
		lines = append(lines,
			row(fmt.Sprintf("%4d  %-28s%5s  ", g.Index, name, "On"),
				fmt.Sprintf("%19s %3s ", nvmlsim.BusIDLong(g.PCIBusID), "Off"),
				fmt.Sprintf("%21s ", "0")),
			row(fmt.Sprintf(" %-5s %-6s %-4s %21s ", "N/A", "N/A", "P0", "N/A /  N/A"),
				fmt.Sprintf("%11s / %9s ", "0MiB", fmt.Sprintf("%dMiB", g.MemoryBytes>>20)),
				fmt.Sprintf("%9s %11s ", "0%", "Default")),
			row(strings.Repeat(" ", 41), strings.Repeat(" ", 24), fmt.Sprintf("%21s ", "Disabled")),
		)
		if i < len(gpus)-1 {
			lines = append(lines, midRule)
		}
	}
	lines = append(lines, midRule, "",
		rule,
		"| Processes:                                                                              |",
		"|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
		"|        ID   ID                                                               Usage      |",
		"|=========================================================================================|",
		"|  No running processes found                                                             |",
		rule,
	)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
