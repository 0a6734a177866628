// Package nvmlinv reads the local node's GPU inventory through NVML, using
// github.com/NVIDIA/go-nvml (cgo; libnvidia-ml.so.1 is opened with dlopen at
// Init, so the binary builds and starts on machines without a driver). The code
// is written against nvml.Interface so that go-nvml's mock servers stand in for
// the real library in tests.
//
// What one collection reads (every call is an NVML device call on each GPU):
//
//   - required, any failure fails the collection: SystemGetDriverVersion,
//     SystemGetNVMLVersion, SystemGetCudaDriverVersion, DeviceGetCount,
//     DeviceGetHandleByIndex, DeviceGetUUID, DeviceGetName, DeviceGetPciInfo,
//     DeviceGetMemoryInfo, and DeviceGetNvLinkRemotePciInfo for every link whose
//     state is enabled;
//   - optional, ERROR_NOT_SUPPORTED is recorded in GPUInfo.Unsupported:
//     DeviceGetUtilizationRates, DeviceGetNvLinkState (also ERROR_INVALID_ARGUMENT,
//     which NVML returns for link numbers the GPU does not have),
//     DeviceGetRetiredPagesPendingStatus, DeviceGetRemappedRows,
//     DeviceGetComputeRunningProcesses.
//
// Health: a GPU is unhealthy when page retirement is pending or row remapping is
// pending or has failed (each needs a GPU reset or service, per NVIDIA's "GPU
// Memory Error Management" guide), or when a call after DeviceGetUUID answers
// ERROR_GPU_IS_LOST: that GPU is then reported unhealthy with the failed call in
// its health notes instead of failing the whole node, so one GPU that fell off
// the bus does not hide the node's other GPUs. Rows already remapped are noted
// without making the GPU unhealthy. XID events are not read: they are delivered
// through an NVML event set that must be registered and waited on continuously,
// which a snapshot inventory does not do.
//
// NVLink domains: each enabled link's remote PCI bus ID is either a GPU of this
// node (a direct link) or another endpoint, an NVSwitch, which joins every GPU
// linked to it. A domain is a connected component of that graph; components of
// two or more GPUs are named "nvlink-0", "nvlink-1", … in the order of their
// lowest device index, and a GPU with no link to another GPU has domain "" (alone).
package nvmlinv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpugov/gpugov/internal/inventory"
)

// Collector reads one node's inventory through NVML. It implements
// inventory.Source. Each collection is one Init … Shutdown session: holding NVML
// open between refreshes would keep the device files open and stop an operator
// from resetting a GPU.
type Collector struct {
	Lib       nvml.Interface   // nvml.New() for the real library; a go-nvml mock in tests
	Node      string           // node name reported in the inventory
	Pool      string           // pool name reported in the inventory
	CPUMilli  int64            // host CPU in milli-cores to report; 0 means not tracked
	MemoryMiB int64            // host memory in MiB to report; 0 means not tracked
	Now       func() time.Time // clock for CollectedAt; time.Now when nil
}

// New returns a Collector over the real NVML library for node in pool.
func New(node, pool string) *Collector {
	return &Collector{Lib: nvml.New(), Node: node, Pool: pool, Now: time.Now}
}

// Collect reads the node's inventory; it returns a one-element slice so that a
// Collector serves as an inventory.Source.
func (c *Collector) Collect(ctx context.Context) ([]inventory.NodeInventory, error) {
	inv, err := c.CollectNode(ctx)
	if err != nil {
		return nil, err
	}
	return []inventory.NodeInventory{inv}, nil
}

// CollectNode reads the node's inventory in one NVML session. Errors: an error
// wrapping ErrUnavailable when the library or the driver is missing; a
// *CallError naming the first required call that failed; ctx.Err() when ctx is
// done between two GPUs; a *CallError for Shutdown when only closing failed.
// Shutdown is called on every path after a successful Init.
func (c *Collector) CollectNode(ctx context.Context) (inv inventory.NodeInventory, err error) {
	if ret := c.Lib.Init(); ret != nvml.SUCCESS {
		return inventory.NodeInventory{}, initError(ret)
	}
	defer func() {
		if ret := c.Lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, callError("Shutdown", "", ret))
		}
	}()
	return c.read(ctx)
}

// read reads the whole inventory inside an open NVML session.
func (c *Collector) read(ctx context.Context) (inventory.NodeInventory, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	inv := inventory.NodeInventory{
		Node: c.Node, Pool: c.Pool, Source: inventory.SourceNVML,
		CPUMilli: c.CPUMilli, MemoryMiB: c.MemoryMiB,
		CollectedAt: now().UTC(),
	}
	if err := c.readSystem(&inv); err != nil {
		return inventory.NodeInventory{}, err
	}
	count, ret := c.Lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return inventory.NodeInventory{}, callError("DeviceGetCount", "", ret)
	}
	readings := make([]*deviceReading, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return inventory.NodeInventory{}, err
		}
		dev, ret := c.Lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return inventory.NodeInventory{}, callError("DeviceGetHandleByIndex", deviceTarget(i), ret)
		}
		r, err := readDevice(i, dev)
		if err != nil {
			return inventory.NodeInventory{}, err
		}
		readings[i] = r
	}
	assignNVLinkDomains(readings)
	inv.GPUs = make([]inventory.GPUInfo, count)
	for i, r := range readings {
		inv.GPUs[i] = r.gpu
	}
	return inv, nil
}

// readSystem reads the driver, NVML and CUDA versions.
func (c *Collector) readSystem(inv *inventory.NodeInventory) error {
	var ret nvml.Return
	if inv.DriverVersion, ret = c.Lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return callError("SystemGetDriverVersion", "", ret)
	}
	if inv.NVMLVersion, ret = c.Lib.SystemGetNVMLVersion(); ret != nvml.SUCCESS {
		return callError("SystemGetNVMLVersion", "", ret)
	}
	cuda, ret := c.Lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return callError("SystemGetCudaDriverVersion", "", ret)
	}
	inv.CUDAVersion = cudaVersionString(cuda)
	return nil
}

// cudaVersionString turns NVML's CUDA driver version number into "major.minor",
// by the CUDA_VERSION_MAJOR/MINOR macros of nvml.h: 12040 → "12.4".
func cudaVersionString(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}
