package nvmlinv_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv/nvmltest"
)

var collectedAt = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func collector(s *server.Server) *nvmlinv.Collector {
	return &nvmlinv.Collector{
		Lib: s, Node: "dgx-01", Pool: "a100-east", CPUMilli: 256000, MemoryMiB: 2 << 20,
		Now: func() time.Time { return collectedAt },
	}
}

// collect runs one collection and checks that NVML was shut down exactly once.
func collect(t *testing.T, s *server.Server) (inventory.NodeInventory, error) {
	t.Helper()
	inv, err := collector(s).CollectNode(context.Background())
	if got := len(s.ShutdownCalls()); got != 1 {
		t.Errorf("Shutdown called %d times, want 1 (Init called %d times)", got, len(s.InitCalls()))
	}
	return inv, err
}

func mustCollect(t *testing.T, s *server.Server) inventory.NodeInventory {
	t.Helper()
	inv, err := collect(t, s)
	if err != nil {
		t.Fatalf("CollectNode: %v", err)
	}
	return inv
}

func domains(inv inventory.NodeInventory) []string {
	var out []string
	for _, g := range inv.GPUs {
		out = append(out, g.NVLinkDomain)
	}
	return out
}

func TestCollectDGXA100(t *testing.T) {
	inv := mustCollect(t, nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll))

	if inv.Node != "dgx-01" || inv.Pool != "a100-east" || inv.Source != inventory.SourceNVML {
		t.Errorf("node/pool/source = %q/%q/%q", inv.Node, inv.Pool, inv.Source)
	}
	if inv.DriverVersion != "550.54.15" || inv.NVMLVersion != "12.550.54.15" || inv.CUDAVersion != "12.4" {
		t.Errorf("versions = driver %q nvml %q cuda %q", inv.DriverVersion, inv.NVMLVersion, inv.CUDAVersion)
	}
	if inv.CPUMilli != 256000 || inv.MemoryMiB != 2<<20 || !inv.CollectedAt.Equal(collectedAt) {
		t.Errorf("cpu %d memory %d at %v", inv.CPUMilli, inv.MemoryMiB, inv.CollectedAt)
	}
	if len(inv.GPUs) != nvmltest.GPUCount {
		t.Fatalf("got %d GPUs, want %d", len(inv.GPUs), nvmltest.GPUCount)
	}
	for i, g := range inv.GPUs {
		if g.Index != i || g.UUID != nvmltest.UUID(i) {
			t.Errorf("GPU %d: index %d uuid %q", i, g.Index, g.UUID)
		}
		if g.Model != "A100-SXM4-40GB" || g.MemoryTotalMiB != 40960 {
			t.Errorf("GPU %d: model %q memory %d MiB", i, g.Model, g.MemoryTotalMiB)
		}
		wantBus := strings.ToLower(strings.TrimPrefix(nvmltest.BusID(i), "0000"))
		if g.PCIBusID != wantBus {
			t.Errorf("GPU %d: bus %q, want %q", i, g.PCIBusID, wantBus)
		}
		if g.UtilizationGPUPercent != int(nvmltest.UtilizationGPU(i)) || g.UtilizationMemoryPercent != int(nvmltest.UtilizationMemory(i)) {
			t.Errorf("GPU %d: utilization %d%%/%d%%", i, g.UtilizationGPUPercent, g.UtilizationMemoryPercent)
		}
		if !g.Healthy || len(g.HealthNotes) != 0 || len(g.Unsupported) != 0 {
			t.Errorf("GPU %d: healthy %v notes %q unsupported %q", i, g.Healthy, g.HealthNotes, g.Unsupported)
		}
		var wantProcs []inventory.Process
		var wantUsed int64
		if i%2 == 1 {
			wantUsed = nvmltest.ProcessMemoryMiB(i)
			wantProcs = []inventory.Process{{PID: nvmltest.ProcessPID, UsedMemoryMiB: wantUsed}}
		}
		if !slices.Equal(g.Processes, wantProcs) || g.MemoryUsedMiB != wantUsed {
			t.Errorf("GPU %d: processes %+v used %d MiB, want %+v %d MiB", i, g.Processes, g.MemoryUsedMiB, wantProcs, wantUsed)
		}
	}
}

func TestNVLinkDomains(t *testing.T) {
	all := []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0"}
	tests := []struct {
		name        string
		topo        nvmltest.Topology
		change      func(s *server.Server)
		wantDomains []string
		wantPeers   [][]int // device indexes of each GPU's peers
		wantNoLink  bool    // every GPU lists "nvlink" as unsupported
	}{
		{
			name: "NVSwitch all-to-all", topo: nvmltest.NVSwitchAllToAll, wantDomains: all,
			wantPeers: [][]int{{1, 2, 3, 4, 5, 6, 7}, {0, 2, 3, 4, 5, 6, 7}, {0, 1, 3, 4, 5, 6, 7}, {0, 1, 2, 4, 5, 6, 7},
				{0, 1, 2, 3, 5, 6, 7}, {0, 1, 2, 3, 4, 6, 7}, {0, 1, 2, 3, 4, 5, 7}, {0, 1, 2, 3, 4, 5, 6}},
		},
		{
			name: "split 2x4 direct links", topo: nvmltest.Split2x4,
			wantDomains: []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", "nvlink-1", "nvlink-1"},
			wantPeers:   [][]int{{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}, {5, 6, 7}, {4, 6, 7}, {4, 5, 7}, {4, 5, 6}},
		},
		{
			name: "split 2x4 through two NVSwitch planes", topo: nvmltest.NVSwitchAllToAll,
			change: func(s *server.Server) {
				// GPUs 0-3 reach switches 0-2 only, GPUs 4-7 switches 3-5 only.
				for i := range nvmltest.GPUCount {
					d := nvmltest.Device(s, i)
					d.GetNvLinkRemotePciInfoFunc = remoteSwitch(3 * (i / 4))
				}
			},
			wantDomains: []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", "nvlink-1", "nvlink-1"},
			wantPeers:   [][]int{{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}, {5, 6, 7}, {4, 6, 7}, {4, 5, 7}, {4, 5, 6}},
		},
		{
			name: "GPU 5 with all links down is alone", topo: nvmltest.NVSwitchAllToAll,
			change: func(s *server.Server) {
				nvmltest.SetTopology(nvmltest.Device(s, 5), 5, nvmltest.LinksDown)
			},
			wantDomains: []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "", "nvlink-0", "nvlink-0"},
			wantPeers: [][]int{{1, 2, 3, 4, 6, 7}, {0, 2, 3, 4, 6, 7}, {0, 1, 3, 4, 6, 7}, {0, 1, 2, 4, 6, 7},
				{0, 1, 2, 3, 6, 7}, {}, {0, 1, 2, 3, 4, 7}, {0, 1, 2, 3, 4, 6}},
		},
		{
			name: "links down everywhere", topo: nvmltest.LinksDown,
			wantDomains: make([]string, 8), wantPeers: make([][]int, 8),
		},
		{
			name: "no NVLink (PCIe)", topo: nvmltest.NoNVLink,
			wantDomains: make([]string, 8), wantPeers: make([][]int, 8), wantNoLink: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := nvmltest.NewDGXA100(tt.topo)
			if tt.change != nil {
				tt.change(s)
			}
			inv := mustCollect(t, s)
			if got := domains(inv); !slices.Equal(got, tt.wantDomains) {
				t.Errorf("domains = %q, want %q", got, tt.wantDomains)
			}
			for i, g := range inv.GPUs {
				want := []string{}
				for _, j := range tt.wantPeers[i] {
					want = append(want, nvmltest.UUID(j))
				}
				if !slices.Equal(g.NVLinkPeers, want) {
					t.Errorf("GPU %d peers = %q, want %q", i, g.NVLinkPeers, want)
				}
				if got := !g.Supports(inventory.SignalNVLink); got != tt.wantNoLink {
					t.Errorf("GPU %d nvlink unsupported = %v, want %v", i, got, tt.wantNoLink)
				}
			}
		})
	}
}

// remoteSwitch answers every link with one of three NVSwitches starting at first.
func remoteSwitch(first int) func(int) (nvml.PciInfo, nvml.Return) {
	return func(link int) (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		id := nvmltest.SwitchBusID(first + link%3)
		for k := range len(id) {
			p.BusId[k] = int8(id[k])
		}
		return p, nvml.SUCCESS
	}
}

func TestLegacyBusIDsMatchNVLinkRemotes(t *testing.T) {
	// The local GPU reports only the four-digit legacy bus ID, the remote end the
	// eight-digit one: they must still be recognised as the same device.
	s := nvmltest.NewDGXA100(nvmltest.Split2x4)
	for i := range nvmltest.GPUCount {
		var p nvml.PciInfo
		legacy := strings.ToLower(strings.TrimPrefix(nvmltest.BusID(i), "0000"))
		for k := range len(legacy) {
			p.BusIdLegacy[k] = int8(legacy[k])
		}
		nvmltest.Device(s, i).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return p, nvml.SUCCESS }
	}
	inv := mustCollect(t, s)
	want := []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", "nvlink-1", "nvlink-1"}
	if got := domains(inv); !slices.Equal(got, want) {
		t.Errorf("domains = %q, want %q", got, want)
	}
}

// failing makes one call of the mock return ERROR_UNKNOWN.
type failing struct {
	wantErr string
	set     func(s *server.Server, ret nvml.Return)
}

func failingCalls() []failing {
	dev3 := func(s *server.Server) *server.Device { return nvmltest.Device(s, 3) }
	return []failing{
		{"nvml SystemGetDriverVersion(): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", r }
		}},
		{"nvml SystemGetNVMLVersion(): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			s.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return "", r }
		}},
		{"nvml SystemGetCudaDriverVersion(): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			s.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, r }
		}},
		{"nvml DeviceGetCount(): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, r }
		}},
		{"nvml DeviceGetHandleByIndex(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			devices := s.Devices
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 3 {
					return nil, r
				}
				return devices[i], nvml.SUCCESS
			}
		}},
		{"nvml DeviceGetUUID(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetUUIDFunc = func() (string, nvml.Return) { return "", r }
		}},
		{"nvml DeviceGetName(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetNameFunc = func() (string, nvml.Return) { return "", r }
		}},
		{"nvml DeviceGetPciInfo(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, r }
		}},
		{"nvml DeviceGetMemoryInfo(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, r }
		}},
		{"nvml DeviceGetUtilizationRates(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, r }
		}},
		{"nvml DeviceGetNvLinkState(device 3, link 2): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			d := dev3(s)
			next := d.GetNvLinkStateFunc
			d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
				if link == 2 {
					return 0, r
				}
				return next(link)
			}
		}},
		{"nvml DeviceGetNvLinkRemotePciInfo(device 3, link 0): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, r }
		}},
		{"nvml DeviceGetRetiredPagesPendingStatus(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, r }
		}},
		{"nvml DeviceGetRemappedRows(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, r }
		}},
		{"nvml DeviceGetComputeRunningProcesses(device 3): ERROR_UNKNOWN", func(s *server.Server, r nvml.Return) {
			dev3(s).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, r }
		}},
	}
}

func TestEveryFailedCallIsAnErrorNamingIt(t *testing.T) {
	for _, f := range failingCalls() {
		t.Run(f.wantErr, func(t *testing.T) {
			s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
			f.set(s, nvml.ERROR_UNKNOWN)
			_, err := collect(t, s)
			if err == nil || err.Error() != f.wantErr {
				t.Fatalf("err = %v, want %q", err, f.wantErr)
			}
			var ce *nvmlinv.CallError
			if !errors.As(err, &ce) || ce.Return != nvml.ERROR_UNKNOWN {
				t.Errorf("err %v is not a *CallError with ERROR_UNKNOWN", err)
			}
		})
	}
}

func TestOptionalSignalsNotSupported(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NoNVLink)
	d := nvmltest.Device(s, 3)
	ns := nvml.ERROR_NOT_SUPPORTED
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, ns }
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, ns }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, ns }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, ns }

	inv := mustCollect(t, s)
	g := inv.GPUs[3]
	want := []string{inventory.SignalUtilization, inventory.SignalNVLink, inventory.SignalRetiredPages,
		inventory.SignalRemappedRows, inventory.SignalProcesses}
	if !slices.Equal(g.Unsupported, want) {
		t.Errorf("unsupported = %q, want %q", g.Unsupported, want)
	}
	if !g.Healthy || len(g.Processes) != 0 {
		t.Errorf("healthy %v processes %+v", g.Healthy, g.Processes)
	}
	// A GPU without measured utilisation gives no sample: zero is not idleness.
	for _, smp := range inv.Samples() {
		if smp.GPUUUID == g.UUID {
			t.Errorf("sample for GPU 3 whose utilization is unsupported: %+v", smp)
		}
	}
	if got := len(inv.Samples()); got != nvmltest.GPUCount-1 {
		t.Errorf("got %d samples, want %d", got, nvmltest.GPUCount-1)
	}
}

func TestRequiredCallNotSupportedIsAnError(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	nvmltest.Device(s, 0).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
	_, err := collect(t, s)
	if want := "nvml DeviceGetMemoryInfo(device 0): ERROR_NOT_SUPPORTED"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestHealthSignals(t *testing.T) {
	tests := []struct {
		name        string
		set         func(d *server.Device)
		wantHealthy bool
		wantNote    string
	}{
		{"retired pages pending", func(d *server.Device) {
			d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		}, false, "retired pages pending"},
		{"row remapping failed", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 2, false, true, nvml.SUCCESS }
		}, false, "row remapping failed"},
		{"row remapping pending", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
		}, false, "row remapping pending"},
		{"rows remapped, nothing pending", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 3, 1, false, false, nvml.SUCCESS }
		}, true, "remapped rows: 3 after correctable and 1 after uncorrectable memory errors"},
		{"GPU lost", func(d *server.Device) {
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		}, false, "nvml DeviceGetMemoryInfo(device 6): ERROR_GPU_IS_LOST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
			tt.set(nvmltest.Device(s, 6))
			inv := mustCollect(t, s)
			g := inv.GPUs[6]
			if g.Healthy != tt.wantHealthy {
				t.Errorf("healthy = %v, want %v (notes %q)", g.Healthy, tt.wantHealthy, g.HealthNotes)
			}
			if !slices.ContainsFunc(g.HealthNotes, func(n string) bool { return strings.Contains(n, tt.wantNote) }) {
				t.Errorf("notes %q lack %q", g.HealthNotes, tt.wantNote)
			}
			for i, other := range inv.GPUs {
				if i != 6 && !other.Healthy {
					t.Errorf("GPU %d unhealthy too: %q", i, other.HealthNotes)
				}
			}
		})
	}
}

func TestLostGPUKeepsItsUUIDAndLeavesTheDomain(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	nvmltest.Device(s, 2).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST }
	inv := mustCollect(t, s)
	g := inv.GPUs[2]
	if g.UUID != nvmltest.UUID(2) || g.Healthy || g.NVLinkDomain != "" {
		t.Errorf("lost GPU: uuid %q healthy %v domain %q", g.UUID, g.Healthy, g.NVLinkDomain)
	}
	if inv.GPUs[1].NVLinkDomain != "nvlink-0" || slices.Contains(inv.GPUs[1].NVLinkPeers, g.UUID) {
		t.Errorf("GPU 1: domain %q peers %q", inv.GPUs[1].NVLinkDomain, inv.GPUs[1].NVLinkPeers)
	}
}

func TestProcessMemoryNotAvailable(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	nvmltest.Device(s, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: math.MaxUint64}, {Pid: 7, UsedGpuMemory: 3 << 20}}, nvml.SUCCESS
	}
	inv := mustCollect(t, s)
	want := []inventory.Process{{PID: 7, UsedMemoryMiB: 3}, {PID: 9, UsedMemoryMiB: inventory.UnknownMiB}}
	if !slices.Equal(inv.GPUs[0].Processes, want) {
		t.Errorf("processes = %+v, want %+v", inv.GPUs[0].Processes, want)
	}
}

func TestInitFailure(t *testing.T) {
	tests := []struct {
		ret         nvml.Return
		want        string
		unavailable bool
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "NVML is not available on this machine (libnvidia-ml.so.1 not found): " +
			"install the NVIDIA driver, or run the agent with --inventory-file FILE", true},
		{nvml.ERROR_DRIVER_NOT_LOADED, "NVML is not available on this machine (the NVIDIA kernel driver is not loaded: " +
			"nvml Init: ERROR_DRIVER_NOT_LOADED): load the NVIDIA driver, or run the agent with --inventory-file FILE", true},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "nvml Init(): ERROR_LIB_RM_VERSION_MISMATCH", false},
	}
	for _, tt := range tests {
		t.Run(nvmlinv.ReturnName(tt.ret), func(t *testing.T) {
			s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
			s.InitFunc = func() nvml.Return { return tt.ret }
			_, err := collector(s).Collect(context.Background())
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if got := errors.Is(err, nvmlinv.ErrUnavailable); got != tt.unavailable {
				t.Errorf("errors.Is(err, ErrUnavailable) = %v, want %v", got, tt.unavailable)
			}
			// Init failed, so there is no session to shut down.
			if n := len(s.ShutdownCalls()); n != 0 {
				t.Errorf("Shutdown called %d times after a failed Init", n)
			}
		})
	}
}

func TestShutdownFailureIsReported(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	s.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	_, err := collect(t, s)
	if want := "nvml Shutdown(): ERROR_UNKNOWN"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}

	// Both the read and the shutdown failing report both.
	s = nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	s.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_TIMEOUT }
	_, err = collect(t, s)
	if want := "nvml DeviceGetCount(): ERROR_TIMEOUT\nnvml Shutdown(): ERROR_UNKNOWN"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestCancelledContextStopsAndShutsDown(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := collector(s).CollectNode(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != 1 || m != 1 {
		t.Errorf("Init %d, Shutdown %d calls; want 1 each", n, m)
	}
}

func TestEveryCollectionIsOneSession(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	c := collector(s)
	for range 3 {
		if _, err := c.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != 3 || m != 3 {
		t.Errorf("Init %d, Shutdown %d calls after 3 collections; want 3 each", n, m)
	}
}

// TestRealLibrary runs the collector against the real NVML. Without a driver (as
// on CI machines) it must give the no-NVML explanation; with one it must read
// every GPU.
func TestRealLibrary(t *testing.T) {
	c := nvmlinv.New("real", "local")
	inv, err := c.CollectNode(context.Background())
	if errors.Is(err, nvmlinv.ErrUnavailable) {
		want := "NVML is not available on this machine (libnvidia-ml.so.1 not found): install the NVIDIA driver, or run the agent with --inventory-file FILE"
		if !strings.Contains(err.Error(), "driver is not loaded") && err.Error() != want {
			t.Errorf("err = %q, want %q", err, want)
		}
		t.Logf("no NVML here: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("CollectNode with a real driver: %v", err)
	}
	if len(inv.GPUs) == 0 || inv.DriverVersion == "" || inv.CUDAVersion == "" {
		t.Fatalf("real inventory lacks GPUs or versions: %+v", inv)
	}
	for _, g := range inv.GPUs {
		if !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryTotalMiB <= 0 || g.Model == "" || g.PCIBusID == "" {
			t.Errorf("real GPU %d: %+v", g.Index, g)
		}
		t.Logf("GPU %d %s %s %d MiB bus %s domain %q healthy %v notes %q unsupported %q",
			g.Index, g.UUID, g.Model, g.MemoryTotalMiB, g.PCIBusID, g.NVLinkDomain, g.Healthy, g.HealthNotes, g.Unsupported)
	}
}

// BenchmarkCollectDGXA100 measures one collection of the 8-GPU NVSwitch mock
// (Init, 8 devices × 36 link probes, Shutdown): the agent's own cost per refresh.
func BenchmarkCollectDGXA100(b *testing.B) {
	c := collector(nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll))
	for b.Loop() {
		if _, err := c.CollectNode(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
