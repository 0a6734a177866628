package nvmlinv

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpugov/gpugov/internal/inventory"
)

// bytesPerMiB converts NVML's byte counts to MiB.
const bytesPerMiB = 1 << 20

// deviceReading is what was read from one GPU, before NVLink domains are known.
type deviceReading struct {
	index   int
	gpu     inventory.GPUInfo
	busID   string   // this GPU's normalised PCI bus ID
	remotes []string // normalised PCI bus IDs at the far end of each enabled NVLink
}

// readDevice reads one GPU. It fails only for a failed required call before the
// GPU is known to be lost; see the package comment.
func readDevice(index int, dev nvml.Device) (*deviceReading, error) {
	r := &deviceReading{index: index, gpu: inventory.GPUInfo{
		Index:       index,
		Healthy:     true,
		HealthNotes: []string{},
		NVLinkPeers: []string{},
		Processes:   []inventory.Process{},
	}}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, callError("DeviceGetUUID", deviceTarget(index), ret)
	}
	r.gpu.UUID = uuid
	steps := []func(nvml.Device) error{
		r.readName, r.readPCI, r.readMemory, r.readUtilization,
		r.readNVLinks, r.readRetiredPages, r.readRemappedRows, r.readProcesses,
	}
	for _, step := range steps {
		err := step(dev)
		var ce *CallError
		if errors.As(err, &ce) && ce.Return == nvml.ERROR_GPU_IS_LOST {
			r.unhealthy("GPU is lost (no longer reachable on the PCI bus): " + err.Error())
			return r, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// unhealthy marks the GPU unhealthy and records why.
func (r *deviceReading) unhealthy(note string) {
	r.gpu.Healthy = false
	r.gpu.HealthNotes = append(r.gpu.HealthNotes, note)
}

// unsupported records that an optional signal answered ERROR_NOT_SUPPORTED.
func (r *deviceReading) unsupported(signal string) {
	r.gpu.Unsupported = append(r.gpu.Unsupported, signal)
}

func (r *deviceReading) target() string { return deviceTarget(r.index) }

// readName sets Model from the device name, without the "NVIDIA " prefix that
// current drivers put before every product name, so that models read the same
// as in job requests and static inventories ("A100-SXM4-80GB").
func (r *deviceReading) readName(dev nvml.Device) error {
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return callError("DeviceGetName", r.target(), ret)
	}
	r.gpu.Model = strings.TrimPrefix(name, "NVIDIA ")
	return nil
}

// readPCI reads the GPU's PCI bus ID, the key NVLink remote ends are matched by.
func (r *deviceReading) readPCI(dev nvml.Device) error {
	info, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return callError("DeviceGetPciInfo", r.target(), ret)
	}
	r.busID = pciBusID(info)
	r.gpu.PCIBusID = r.busID
	return nil
}

// readMemory reads total and used device memory (MiB, rounded down).
func (r *deviceReading) readMemory(dev nvml.Device) error {
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return callError("DeviceGetMemoryInfo", r.target(), ret)
	}
	r.gpu.MemoryTotalMiB = int64(mem.Total / bytesPerMiB)
	r.gpu.MemoryUsedMiB = int64(mem.Used / bytesPerMiB)
	return nil
}

// readUtilization reads GPU and memory utilisation over NVML's last sample period.
func (r *deviceReading) readUtilization(dev nvml.Device) error {
	u, ret := dev.GetUtilizationRates()
	switch ret {
	case nvml.SUCCESS:
		r.gpu.UtilizationGPUPercent = int(u.Gpu)
		r.gpu.UtilizationMemoryPercent = int(u.Memory)
		return nil
	case nvml.ERROR_NOT_SUPPORTED:
		r.unsupported(inventory.SignalUtilization)
		return nil
	}
	return callError("DeviceGetUtilizationRates", r.target(), ret)
}

// readNVLinks records the remote PCI bus ID of every enabled link. Links are
// probed up to NVLINK_MAX_LINKS as nvidia-smi does; a link number the GPU does
// not have answers NOT_SUPPORTED or INVALID_ARGUMENT and is skipped. When no link
// answers at all the GPU has no NVLink, recorded as the unsupported signal
// "nvlink".
func (r *deviceReading) readNVLinks(dev nvml.Device) error {
	anyLink := false
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(link)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return callError("DeviceGetNvLinkState", linkTarget(r.index, link), ret)
		}
		anyLink = true
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		remote, ret := dev.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			return callError("DeviceGetNvLinkRemotePciInfo", linkTarget(r.index, link), ret)
		}
		r.remotes = append(r.remotes, pciBusID(remote))
	}
	if !anyLink {
		r.unsupported(inventory.SignalNVLink)
	}
	return nil
}

// readRetiredPages marks the GPU unhealthy when retired pages are pending: ECC
// errors retired device memory pages that are blacklisted only after a GPU reset.
func (r *deviceReading) readRetiredPages(dev nvml.Device) error {
	state, ret := dev.GetRetiredPagesPendingStatus()
	switch ret {
	case nvml.SUCCESS:
		if state == nvml.FEATURE_ENABLED {
			r.unhealthy("retired pages pending: memory pages were retired after ECC errors; reset the GPU to apply it")
		}
		return nil
	case nvml.ERROR_NOT_SUPPORTED:
		r.unsupported(inventory.SignalRetiredPages)
		return nil
	}
	return callError("DeviceGetRetiredPagesPendingStatus", r.target(), ret)
}

// readRemappedRows reads row remapping (Ampere and later): a pending remap needs
// a GPU reset and a failed remap means the GPU is out of spare rows; either makes
// the GPU unhealthy. Rows already remapped are only noted.
func (r *deviceReading) readRemappedRows(dev nvml.Device) error {
	corrected, uncorrected, pending, failed, ret := dev.GetRemappedRows()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		r.unsupported(inventory.SignalRemappedRows)
		return nil
	default:
		return callError("DeviceGetRemappedRows", r.target(), ret)
	}
	if failed {
		r.unhealthy("row remapping failed: no spare memory rows are left; the GPU needs service")
	}
	if pending {
		r.unhealthy("row remapping pending: reset the GPU to apply it")
	}
	if corrected > 0 || uncorrected > 0 {
		r.gpu.HealthNotes = append(r.gpu.HealthNotes, fmt.Sprintf(
			"remapped rows: %d after correctable and %d after uncorrectable memory errors", corrected, uncorrected))
	}
	return nil
}

// readProcesses lists the compute processes on the GPU, ordered by PID.
func (r *deviceReading) readProcesses(dev nvml.Device) error {
	procs, ret := dev.GetComputeRunningProcesses()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		r.unsupported(inventory.SignalProcesses)
		return nil
	default:
		return callError("DeviceGetComputeRunningProcesses", r.target(), ret)
	}
	for _, p := range procs {
		used := inventory.UnknownMiB
		// NVML_VALUE_NOT_AVAILABLE is -1 as unsigned long long.
		if p.UsedGpuMemory != math.MaxUint64 {
			used = int64(p.UsedGpuMemory / bytesPerMiB)
		}
		r.gpu.Processes = append(r.gpu.Processes, inventory.Process{PID: p.Pid, UsedMemoryMiB: used})
	}
	slices.SortFunc(r.gpu.Processes, func(a, b inventory.Process) int { return cmp.Compare(a.PID, b.PID) })
	return nil
}
