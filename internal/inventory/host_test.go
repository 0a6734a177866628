package inventory

import (
	"runtime"
	"strings"
	"testing"
)

func TestParseMemTotal(t *testing.T) {
	got, err := parseMemTotal(strings.NewReader("MemFree:  1000 kB\nMemTotal:       131843684 kB\nSwapTotal: 0 kB\n"))
	if err != nil || got != 131843684/1024 {
		t.Errorf("parseMemTotal = %d, %v; want %d", got, err, 131843684/1024)
	}
	for _, bad := range []string{"MemFree: 1 kB\n", "MemTotal: 12 MB\n", "MemTotal: x kB\n", "MemTotal: -4 kB\n"} {
		if _, err := parseMemTotal(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMemTotal(%q) accepted it", bad)
		}
	}
}

func TestHostResources(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("HostResources reads /proc/meminfo, which only Linux has")
	}
	cpu, mem, err := HostResources()
	if err != nil {
		t.Fatal(err)
	}
	if cpu != int64(runtime.NumCPU())*1000 || mem <= 0 {
		t.Errorf("HostResources = %d milli-CPU, %d MiB", cpu, mem)
	}
}
