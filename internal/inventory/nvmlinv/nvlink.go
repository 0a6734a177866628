package nvmlinv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// assignNVLinkDomains sets NVLinkDomain and NVLinkPeers of every reading from the
// remote ends of its enabled links (see the package comment for the rule).
func assignNVLinkDomains(readings []*deviceReading) {
	byBus := make(map[string]int, len(readings))
	for i, r := range readings {
		if r.busID != "" {
			byBus[r.busID] = i
		}
	}
	sets := newDisjointSets(len(readings))
	peers := make([]map[int]bool, len(readings))
	for i := range peers {
		peers[i] = map[int]bool{}
	}
	link := func(a, b int) {
		if a == b {
			return
		}
		sets.union(a, b)
		peers[a][b], peers[b][a] = true, true
	}
	// Remote ends that are not GPUs of this node: NVSwitches. Every GPU linked to
	// the same switch can reach every other through it.
	switches := map[string][]int{}
	for i, r := range readings {
		for _, remote := range r.remotes {
			if j, ok := byBus[remote]; ok {
				link(i, j)
				continue
			}
			if !slices.Contains(switches[remote], i) {
				switches[remote] = append(switches[remote], i)
			}
		}
	}
	for _, members := range switches {
		for _, a := range members {
			for _, b := range members {
				link(a, b)
			}
		}
	}
	names := domainNames(sets, len(readings))
	for i, r := range readings {
		r.gpu.NVLinkDomain = names[i]
		for j := range readings {
			if peers[i][j] {
				r.gpu.NVLinkPeers = append(r.gpu.NVLinkPeers, readings[j].gpu.UUID)
			}
		}
	}
}

// domainNames names each component of two or more devices "nvlink-<n>", numbered
// in the order of the component's lowest device index; devices alone get "".
func domainNames(sets *disjointSets, n int) []string {
	size := make(map[int]int, n)
	for i := range n {
		size[sets.find(i)]++
	}
	byRoot := map[int]string{}
	names := make([]string, n)
	for i := range n {
		root := sets.find(i)
		if size[root] < 2 {
			continue
		}
		name, ok := byRoot[root]
		if !ok {
			name = fmt.Sprintf("nvlink-%d", len(byRoot))
			byRoot[root] = name
		}
		names[i] = name
	}
	return names
}

// disjointSets is a union-find forest over 0..n-1 (path halving, no ranks: n is
// the number of GPUs of one node).
type disjointSets struct{ parent []int }

func newDisjointSets(n int) *disjointSets {
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	return &disjointSets{parent: parent}
}

func (s *disjointSets) find(x int) int {
	for s.parent[x] != x {
		s.parent[x] = s.parent[s.parent[x]]
		x = s.parent[x]
	}
	return x
}

func (s *disjointSets) union(a, b int) {
	ra, rb := s.find(a), s.find(b)
	if ra != rb {
		s.parent[max(ra, rb)] = min(ra, rb)
	}
}

// pciBusID returns the normalised bus ID of a PCI info: the BusId string NVML
// fills ("00000000:07:00.0"), else the legacy one ("0000:07:00.0"), else one
// built from the numeric fields; see normalizeBusID.
func pciBusID(info nvml.PciInfo) string {
	if s := cString(info.BusId[:]); s != "" {
		return normalizeBusID(s)
	}
	if s := cString(info.BusIdLegacy[:]); s != "" {
		return normalizeBusID(s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", info.Domain, info.Bus, info.Device)
}

// normalizeBusID writes a "domain:bus:device.function" PCI address in lower case
// with a four-digit domain, so that NVML's eight-digit BusId and its four-digit
// legacy form of the same device compare equal. Text that is not of that shape is
// only lower-cased.
func normalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	domain, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return s
	}
	d, err := strconv.ParseUint(domain, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// cString returns the NUL-terminated text of a C char array.
func cString(b []int8) string {
	n := slices.Index(b, 0)
	if n < 0 {
		n = len(b)
	}
	out := make([]byte, n)
	for i := range n {
		out[i] = byte(b[i])
	}
	return string(out)
}
