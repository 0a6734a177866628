package inventory

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// meminfoPath is the Linux file HostResources reads the host's memory from.
const meminfoPath = "/proc/meminfo"

// HostResources returns this machine's CPU in milli-cores (runtime.NumCPU × 1000:
// the CPUs this process may run on) and its total memory in MiB (MemTotal of
// /proc/meminfo). It returns an error naming the file when the memory cannot be
// read, e.g. on a system without /proc.
func HostResources() (cpuMilli, memoryMiB int64, err error) {
	f, err := os.Open(meminfoPath)
	if err != nil {
		return 0, 0, fmt.Errorf("reading host memory: %w", err)
	}
	defer f.Close()
	memoryMiB, err = parseMemTotal(f)
	if err != nil {
		return 0, 0, fmt.Errorf("reading host memory from %s: %w", meminfoPath, err)
	}
	return int64(runtime.NumCPU()) * 1000, memoryMiB, nil
}

// parseMemTotal returns the MemTotal line of a /proc/meminfo text in MiB. The
// kernel writes it in KiB ("MemTotal:       131843684 kB").
func parseMemTotal(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected MemTotal line %q (want \"MemTotal: N kB\")", sc.Text())
		}
		kib, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kib <= 0 {
			return 0, fmt.Errorf("unexpected MemTotal value %q", fields[0])
		}
		return kib / 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no MemTotal line")
}
