// Package nvmltest builds go-nvml mock NVML servers for tests of the NVML
// inventory, the way net/http/httptest builds servers. It starts from go-nvml's
// DGX A100 model (8 × A100-SXM4-40GB, driver 550.54.15, CUDA 12.4), makes its
// UUIDs and PCI bus IDs deterministic, and answers the calls that model leaves
// unset (utilisation, NVLink, page retirement, row remapping, processes, PCI
// bus IDs) according to a chosen NVLink topology. Tests change single answers by
// setting the devices' *Func fields afterwards.
package nvmltest

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GPUCount is the number of GPUs of the DGX A100 model.
const GPUCount = 8

// LinksPerGPU is the number of NVLinks of an A100 (NVLink 3).
const LinksPerGPU = 12

// NVSwitchCount is the number of NVSwitches of a DGX A100; each GPU has two links
// to each switch.
const NVSwitchCount = 6

// Topology is the NVLink wiring the mock answers with.
type Topology int

// The topologies.
const (
	// NVSwitchAllToAll is a DGX A100: link l of every GPU goes to NVSwitch l/2, so
	// all eight GPUs form one domain.
	NVSwitchAllToAll Topology = iota
	// Split2x4 is two islands of four GPUs (0-3 and 4-7) with direct GPU-to-GPU
	// links, four to each other GPU of the island, and no link between islands.
	Split2x4
	// NoNVLink answers ERROR_NOT_SUPPORTED for every link, as PCIe cards do.
	NoNVLink
	// LinksDown has twelve links per GPU, all in state FEATURE_DISABLED.
	LinksDown
)

// UUID returns the deterministic UUID of device i.
func UUID(i int) string { return fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i) }

// BusID returns device i's PCI bus ID as NVML's BusId field writes it (eight-digit
// domain, upper-case hex).
func BusID(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x07+i*0x10) }

// SwitchBusID returns the PCI bus ID of NVSwitch s.
func SwitchBusID(s int) string { return fmt.Sprintf("00000000:%02X:00.0", 0xC4+s) }

// ProcessPID is the PID of the one compute process on every odd-numbered GPU;
// even-numbered GPUs run none.
const ProcessPID = 4242

// ProcessMemoryMiB is the memory that process holds on GPU i (odd i).
func ProcessMemoryMiB(i int) int64 { return int64(i) * 1024 }

// UtilizationGPU is the GPU utilisation in percent that GPU i reports.
func UtilizationGPU(i int) uint32 { return uint32(10 * i) }

// UtilizationMemory is the memory utilisation in percent that GPU i reports.
func UtilizationMemory(i int) uint32 { return uint32(5 * i) }

// NewDGXA100 returns a DGX A100 mock whose every device answers all calls the
// inventory makes: deterministic UUIDs and bus IDs, the device name of the real
// card ("NVIDIA A100-SXM4-40GB"; the model says "Mock NVIDIA …"), memory used
// equal to its processes' memory, healthy memory, the utilisation above and the
// given NVLink topology.
func NewDGXA100(topo Topology) *server.Server {
	s := dgxa100.New()
	for i := range s.Devices {
		configure(Device(s, i), i, topo)
	}
	return s
}

// Device returns device i of a server built by NewDGXA100, to change its answers.
func Device(s *server.Server, i int) *server.Device {
	return s.Devices[i].(*server.Device)
}

// configure sets device i's identity, health, utilisation, processes and links.
func configure(d *server.Device, i int, topo Topology) {
	d.UUID = UUID(i)
	d.Config.Name = "NVIDIA A100-SXM4-40GB"
	pci := pciInfo(BusID(i))
	pci.PciDeviceId = d.Config.PciDeviceId
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }

	var procs []nvml.ProcessInfo
	var used uint64
	if i%2 == 1 {
		used = uint64(ProcessMemoryMiB(i)) << 20
		procs = []nvml.ProcessInfo{{Pid: ProcessPID, UsedGpuMemory: used}}
	}
	d.MemoryInfo.Used = used
	d.MemoryInfo.Free = d.MemoryInfo.Total - used
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: UtilizationGPU(i), Memory: UtilizationMemory(i)}, nvml.SUCCESS
	}
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	SetTopology(d, i, topo)
}

// SetTopology sets device i's GetNvLinkStateFunc and GetNvLinkRemotePciInfoFunc
// to its wiring in topo. Link numbers the A100 does not have (12 and up) answer
// ERROR_INVALID_ARGUMENT, as NVML does.
func SetTopology(d *server.Device, i int, topo Topology) {
	remote := func(link int) string {
		if topo == Split2x4 {
			island := i / 4 * 4
			var others []int
			for j := island; j < island+4; j++ {
				if j != i {
					others = append(others, j)
				}
			}
			return BusID(others[link/4])
		}
		return SwitchBusID(link / 2)
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		switch {
		case topo == NoNVLink:
			return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
		case link < 0 || link >= LinksPerGPU:
			return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
		case topo == LinksDown:
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		if topo == NoNVLink || link < 0 || link >= LinksPerGPU {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return pciInfo(remote(link)), nvml.SUCCESS
	}
}

// pciInfo returns a PciInfo whose BusId holds busID, as NVML fills it.
func pciInfo(busID string) nvml.PciInfo {
	var p nvml.PciInfo
	for k := 0; k < len(busID) && k < len(p.BusId)-1; k++ {
		p.BusId[k] = int8(busID[k])
	}
	return p
}
